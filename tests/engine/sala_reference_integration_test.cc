// The CPU engine on MiniCPM-SALA against the independent fp32 reference outputs of the shared tiny-sala model
// (computed from the official modeling code's semantics, never by this engine): full logits, the residual
// stream layer by layer, teacher-forced top-1, greedy continuations, and decode == prefill.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine_runs.h"
#include "single_sequence.h"
#include "tiny_model.h"

namespace soartune::engine {
namespace {

using testing::field_of;
using testing::fp32_engine;
using testing::greedy_continuations;
using testing::random_ids;
using testing::read_jsonl;
using testing::SingleSequence;
using testing::tiny_sala_dir;

const ModelWeights& sala() { return testing::shared_model("hf:" + tiny_sala_dir()); }

// The backend driven directly, one sequence in slot 0, so every position's logits can be read: fp32 KV.
SingleSequence single_sequence(const ModelWeights& w, int max_context = 256, int threads = 2) {
  LaunchConfig l;
  l.kv_cache_dtype = KvCacheDtype::kFP32;
  return SingleSequence(make_cpu_backend(threads), w, l, /*slot=*/0, max_context);
}

TEST(SalaReference, LogitsAndResidualStreamMatchFp32Reference) {
  SKIP_WITHOUT_TINY_SALA();
  const testing::SalaReferenceLogits ref = testing::read_sala_reference_logits();
  const ModelConfig& c = sala().config;
  ASSERT_TRUE(testing::sala_reference_shapes_match(ref, c));
  SingleSequence run = single_sequence(sala());
  double worst = 0;
  for (int b = 0; b < 4; ++b) {
    std::vector<float> residual;
    const std::vector<float> logits = run.feed(testing::sala_reference_prompt(ref, b), 0, b == 0 ? &residual : nullptr);
    const double err =
        testing::max_abs_diff(logits.data(), ref.logits.data() + static_cast<std::size_t>(b) * 64 * c.vocab, logits.size());
    std::printf("prompt %d: max |logit - reference| = %.3g\n", b, err);
    worst = std::max(worst, err);
    if (b != 0) continue;
    // Layer by layer: max abs difference relative to the layer's largest reference value.
    const std::size_t per = static_cast<std::size_t>(64) * c.hidden;
    for (int l = 0; l <= c.layers; ++l) {
      double scale = 0;
      const double diff = testing::max_abs_diff(residual.data() + l * per, ref.residual.data() + l * per, per, &scale);
      std::printf("  residual stream %s %d: max diff %.3g, relative %.3g\n", l == 0 ? "embedding" : "after layer", l == 0 ? 0 : l - 1,
                  diff, diff / scale);
      EXPECT_LE(diff / scale, 1e-4) << "residual stream index " << l;
    }
  }
  EXPECT_LE(worst, 1e-3);
}

TEST(SalaReference, DecodeStepByStepEqualsOneFullPrefill) {
  SKIP_WITHOUT_TINY_SALA();
  // 150 tokens: prefill chunks of 64 inside the lightning layers cross two chunk boundaries; decode crosses
  // the KV pages of the softmax layers.
  const std::vector<int32_t> ids = random_ids(150, 12345, 4094);
  const int V = sala().config.vocab;
  SingleSequence full = single_sequence(sala()), stepwise = single_sequence(sala());
  const std::vector<float> want = full.feed(ids, 0);
  const std::vector<float> got = stepwise.feed_steps(ids, 100, 100);  // one prefill of 100, then 50 decode steps
  ASSERT_EQ(got.size(), want.size());
  double err = 0;
  for (std::size_t i = 0; i < got.size(); ++i) err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
  std::printf("prefill(100) + 50 decode steps vs one prefill of 150: max |logit diff| = %.3g\n", err);
  EXPECT_LE(err, 1e-4);
  for (int p = 0; p < 150; ++p) {
    const float* a = got.data() + static_cast<std::size_t>(p) * V;
    const float* b = want.data() + static_cast<std::size_t>(p) * V;
    EXPECT_EQ(std::max_element(a, a + V) - a, std::max_element(b, b + V) - b) << "position " << p;
  }
}

TEST(SalaReference, TeacherForcedTop1MatchesFp32Reference) {
  SKIP_WITHOUT_TINY_SALA();
  const auto rows = read_jsonl(tiny_sala_dir() + "/eval_public.jsonl");
  ASSERT_EQ(rows.size(), 32u);
  EXPECT_GE(testing::fp32_top1_agreement(sala(), rows, "ref_teacher_forced_top1", 160).pct(), 99.9);
}

TEST(SalaReference, GreedyContinuationsMatchBatched) {
  SKIP_WITHOUT_TINY_SALA();
  const auto rows = read_jsonl(tiny_sala_dir() + "/greedy_reference.jsonl");
  ASSERT_EQ(rows.size(), 16u);
  // 6 running at once out of 16 and a 40-token prefill budget: slots are reused (their lightning state reset),
  // prompts are split across steps, decode and prefill tokens share steps.
  auto engine = fp32_engine(sala(), 6, 40, 160);
  ASSERT_NE(engine, nullptr);
  const auto want = field_of(rows, "reference_greedy_fp32");
  const auto got = greedy_continuations(*engine, rows, "reference_greedy_fp32");
  int exact = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const bool same = got[i] == want[i];
    exact += same;
    EXPECT_TRUE(same) << "request " << i;
  }
  std::printf("greedy continuations equal to the reference: %d of %zu\n", exact, rows.size());
}

}  // namespace
}  // namespace soartune::engine
