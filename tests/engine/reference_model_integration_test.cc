// The CPU engine against an independent fp32 implementation of the shared tiny model.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "tiny_model.h"

namespace soartune::engine {
namespace {

using testing::read_jsonl;
using testing::tiny_model_dir;

std::unique_ptr<Engine> make_engine(const ModelWeights& w, KvCacheDtype kv, int max_running = 16, int prefill = 1024) {
  EngineOptions o;
  o.launch.kv_cache_dtype = kv;
  o.launch.max_running_requests = max_running;
  o.launch.max_prefill_tokens = prefill;
  o.max_context = 256;
  auto e = Engine::create(make_cpu_backend(), w, o);
  EXPECT_TRUE(e.ok()) << e.status().message;
  return std::move(e).value();
}

const ModelWeights& tiny() {
  static const ModelWeights w = [] {
    auto r = load_model("hf:" + tiny_model_dir());
    EXPECT_TRUE(r.ok()) << r.status().message;
    return r.ok() ? std::move(r).value() : ModelWeights{};
  }();
  return w;
}

TEST(ReferenceModel, TeacherForcedTop1MatchesFp32Reference) {
  SKIP_WITHOUT_TINY_MODEL();
  const auto rows = read_jsonl(tiny_model_dir() + "/eval_public.jsonl");
  ASSERT_EQ(rows.size(), 64u);
  auto engine = make_engine(tiny(), KvCacheDtype::kFP32);
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : rows) {
    ASSERT_TRUE(engine->add_teacher_forced(r["prompt_ids"].get<std::vector<int32_t>>(),
                                           r["continuation_ids"].get<std::vector<int32_t>>()).ok());
    want.push_back(r["hf_fp32_teacher_forced_top1"].get<std::vector<int32_t>>());
  }
  ASSERT_TRUE(engine->run_until_idle().ok());
  auto done = engine->take_finished();
  ASSERT_EQ(done.size(), rows.size());
  int64_t match = 0, total = 0;
  for (const auto& f : done) {
    const auto& w = want[static_cast<std::size_t>(f.id)];
    ASSERT_EQ(f.output.size(), w.size());
    for (std::size_t i = 0; i < w.size(); ++i) match += f.output[i] == w[i];
    total += static_cast<int64_t>(w.size());
  }
  const double pct = 100.0 * match / total;
  std::printf("teacher-forced fp32 top-1 agreement: %.3f%% of %lld positions\n", pct, static_cast<long long>(total));
  EXPECT_GE(pct, 99.5);
}

TEST(ReferenceModel, GreedyContinuationsMatchBatched) {
  SKIP_WITHOUT_TINY_MODEL();
  const auto rows = read_jsonl(tiny_model_dir() + "/greedy_reference.jsonl");
  ASSERT_EQ(rows.size(), 32u);
  // 16 running at once out of 32 and a small chunk: sequences join and leave mid-flight, prompts split.
  auto engine = make_engine(tiny(), KvCacheDtype::kFP32, 16, 48);
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : rows) {
    want.push_back(r["reference_greedy_fp32"].get<std::vector<int32_t>>());
    ASSERT_TRUE(engine->add_request(r["prompt_ids"].get<std::vector<int32_t>>(), static_cast<int>(want.back().size())).ok());
  }
  ASSERT_TRUE(engine->run_until_idle().ok());
  auto done = engine->take_finished();
  ASSERT_EQ(done.size(), rows.size());
  int exact = 0;
  for (const auto& f : done) exact += f.output == want[static_cast<std::size_t>(f.id)];
  std::printf("greedy continuations equal to the reference: %d of %zu\n", exact, rows.size());
  EXPECT_GE(exact, 30);
}

}  // namespace
}  // namespace soartune::engine
