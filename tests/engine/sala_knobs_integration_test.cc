// lightning_chunk against the shared tiny-sala's independent fp32 references: every chunk size the knob allows
// gives the reference logits and the reference teacher-forced top-1, as the default chunk of 64 does.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "tiny_model.h"

namespace soartune::engine {
namespace {

using testing::read_jsonl;
using testing::tiny_sala_dir;

const ModelWeights& sala() {
  static const ModelWeights w = [] {
    auto r = load_model("hf:" + tiny_sala_dir());
    EXPECT_TRUE(r.ok()) << r.status().message;
    return r.ok() ? std::move(r).value() : ModelWeights{};
  }();
  return w;
}

// input_ids [4][64] (int64) and logits [4][64][vocab] (fp32) of reference_logits.safetensors.
void read_reference(std::vector<int64_t>* ids, std::vector<float>* logits) {
  std::ifstream in(tiny_sala_dir() + "/reference_logits.safetensors", std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, ' ');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const auto h = nlohmann::json::parse(header);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto copy = [&](const char* name, auto* out) {
    const auto off = h.at(name).at("data_offsets").get<std::vector<std::size_t>>();
    using T = typename std::remove_pointer_t<decltype(out)>::value_type;
    out->resize((off[1] - off[0]) / sizeof(T));
    std::memcpy(out->data(), data.data() + off[0], off[1] - off[0]);
  };
  copy("input_ids", ids);
  copy("logits", logits);
}

std::vector<float> prefill_logits(const std::vector<int32_t>& ids, int chunk) {
  const ModelWeights& w = sala();
  BackendPlan plan;
  plan.weights = &w;
  plan.launch.kv_cache_dtype = KvCacheDtype::kFP32;
  plan.launch.lightning_chunk = chunk;
  plan.max_sequences = 1;
  plan.max_step_tokens = plan.max_output_rows = plan.max_context = static_cast<int>(ids.size());
  auto backend = make_cpu_backend(2);
  const Status st = backend->prepare(plan);
  EXPECT_TRUE(st.ok()) << st.message;
  std::vector<int32_t> pages;
  for (int p = 0; p < backend->kv_pages(); ++p) pages.push_back(p);
  const int T = static_cast<int>(ids.size());
  std::vector<int32_t> pos(static_cast<std::size_t>(T)), rows(static_cast<std::size_t>(T)), argmax(static_cast<std::size_t>(T));
  for (int t = 0; t < T; ++t) pos[static_cast<std::size_t>(t)] = t, rows[static_cast<std::size_t>(t)] = t;
  StepSequence seq{0, 0, T, 0, std::span<const int32_t>(pages)};
  Step step{ids, pos, std::span<const StepSequence>(&seq, 1), rows, 0};
  std::vector<float> lg(static_cast<std::size_t>(T) * w.config.vocab);
  StepOutput out{argmax, lg, {}};
  const Status s = backend->forward(step, out);
  EXPECT_TRUE(s.ok()) << s.message;
  return lg;
}

TEST(SalaChunkReference, EveryChunkSizeGivesTheReferenceLogits) {
  SKIP_WITHOUT_TINY_SALA();
  std::vector<int64_t> ids;
  std::vector<float> ref;
  read_reference(&ids, &ref);
  const int V = sala().config.vocab;
  ASSERT_EQ(ids.size(), 4u * 64u);
  for (int chunk : {32, 64, 128}) {
    double worst = 0;
    for (int b = 0; b < 4; ++b) {
      const std::vector<int32_t> prompt(ids.begin() + b * 64, ids.begin() + (b + 1) * 64);
      const std::vector<float> got = prefill_logits(prompt, chunk);
      const float* want = ref.data() + static_cast<std::size_t>(b) * 64 * V;
      for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
    }
    std::printf("lightning_chunk %d: max |logit - reference| = %.3g over 4 prompts\n", chunk, worst);
    EXPECT_LE(worst, 1e-3) << "chunk " << chunk;
  }
}

TEST(SalaChunkReference, EveryChunkSizeKeepsTeacherForcedTop1) {
  SKIP_WITHOUT_TINY_SALA();
  const auto rows = read_jsonl(tiny_sala_dir() + "/eval_public.jsonl");
  ASSERT_EQ(rows.size(), 32u);
  for (int chunk : {32, 128}) {
    EngineOptions o;
    o.launch.kv_cache_dtype = KvCacheDtype::kFP32;
    o.launch.lightning_chunk = chunk;
    o.launch.max_running_requests = 16;
    o.launch.max_prefill_tokens = 1024;
    o.max_context = 160;
    auto engine = Engine::create(make_cpu_backend(2), sala(), o);
    ASSERT_TRUE(engine.ok()) << engine.status().message;
    std::vector<std::vector<int32_t>> want;
    for (const auto& r : rows) {
      ASSERT_TRUE(engine.value()->add_teacher_forced(r["prompt_ids"].get<std::vector<int32_t>>(),
                                                     r["continuation_ids"].get<std::vector<int32_t>>()).ok());
      want.push_back(r["ref_teacher_forced_top1"].get<std::vector<int32_t>>());
    }
    ASSERT_TRUE(engine.value()->run_until_idle().ok());
    int64_t match = 0, total = 0;
    for (const auto& f : engine.value()->take_finished()) {
      const auto& w = want[static_cast<std::size_t>(f.id)];
      ASSERT_EQ(f.output.size(), w.size());
      for (std::size_t i = 0; i < w.size(); ++i) match += f.output[i] == w[i];
      total += static_cast<int64_t>(w.size());
    }
    ASSERT_EQ(total, 32 * 32);
    const double pct = 100.0 * match / total;
    std::printf("lightning_chunk %d: teacher-forced top-1 agreement %.3f%% of %lld positions\n", chunk, pct,
                static_cast<long long>(total));
    EXPECT_GE(pct, 99.9) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace soartune::engine
