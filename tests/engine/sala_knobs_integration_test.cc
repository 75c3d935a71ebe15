// lightning_chunk against the shared tiny-sala's independent fp32 references: every chunk size the knob allows
// gives the reference logits and the reference teacher-forced top-1, as the default chunk of 64 does.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine_runs.h"
#include "tiny_model.h"

namespace soartune::engine {
namespace {

using testing::agreement;
using testing::field_of;
using testing::read_jsonl;
using testing::teacher_forced_top1;
using testing::tiny_sala_dir;

const ModelWeights& sala() { return testing::shared_model("hf:" + tiny_sala_dir()); }

std::vector<float> prefill_logits(const std::vector<int32_t>& ids, int chunk) {
  LaunchConfig launch;
  launch.lightning_chunk = chunk;
  return testing::cpu_logits(sala(), ids, launch);
}

TEST(SalaChunkReference, EveryChunkSizeGivesTheReferenceLogits) {
  SKIP_WITHOUT_TINY_SALA();
  const testing::SalaReferenceLogits ref = testing::read_sala_reference_logits();
  const int V = sala().config.vocab;
  ASSERT_EQ(ref.input_ids.size(), 4u * 64u);
  for (int chunk : {32, 64, 128}) {
    double worst = 0;
    for (int b = 0; b < 4; ++b) {
      const std::vector<float> got = prefill_logits(testing::sala_reference_prompt(ref, b), chunk);
      const float* want = ref.logits.data() + static_cast<std::size_t>(b) * 64 * V;
      worst = std::max(worst, testing::max_abs_diff(got.data(), want, got.size()));
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
    LaunchConfig launch;
    launch.kv_cache_dtype = KvCacheDtype::kFP32;
    launch.lightning_chunk = chunk;
    launch.max_running_requests = 16;
    launch.max_prefill_tokens = 1024;
    auto engine = testing::cpu_engine(sala(), launch, 160, 2);
    ASSERT_NE(engine, nullptr);
    const testing::Agreement a = agreement(teacher_forced_top1(*engine, rows), field_of(rows, "ref_teacher_forced_top1"));
    const int64_t total = a.positions;
    ASSERT_EQ(total, 32 * 32);
    const double pct = a.pct();
    std::printf("lightning_chunk %d: teacher-forced top-1 agreement %.3f%% of %lld positions\n", chunk, pct,
                static_cast<long long>(total));
    EXPECT_GE(pct, 99.9) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace soartune::engine
