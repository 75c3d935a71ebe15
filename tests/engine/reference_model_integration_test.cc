// The CPU engine against an independent fp32 implementation of the shared tiny model.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine_runs.h"
#include "tiny_model.h"

namespace soartune::engine {
namespace {

using testing::field_of;
using testing::fp32_engine;
using testing::greedy_continuations;
using testing::read_jsonl;
using testing::shared_model;
using testing::tiny_model_dir;

const ModelWeights& tiny() { return shared_model("hf:" + tiny_model_dir()); }

TEST(ReferenceModel, TeacherForcedTop1MatchesFp32Reference) {
  SKIP_WITHOUT_TINY_MODEL();
  const auto rows = read_jsonl(tiny_model_dir() + "/eval_public.jsonl");
  ASSERT_EQ(rows.size(), 64u);
  EXPECT_GE(testing::fp32_top1_agreement(tiny(), rows, "hf_fp32_teacher_forced_top1").pct(), 99.5);
}

TEST(ReferenceModel, GreedyContinuationsMatchBatched) {
  SKIP_WITHOUT_TINY_MODEL();
  const auto rows = read_jsonl(tiny_model_dir() + "/greedy_reference.jsonl");
  ASSERT_EQ(rows.size(), 32u);
  // 16 running at once out of 32 and a small chunk: sequences join and leave mid-flight, prompts split.
  auto engine = fp32_engine(tiny(), 16, 48);
  ASSERT_NE(engine, nullptr);
  const auto want = field_of(rows, "reference_greedy_fp32");
  const auto got = greedy_continuations(*engine, rows, "reference_greedy_fp32");
  int exact = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) exact += got[i] == want[i];
  std::printf("greedy continuations equal to the reference: %d of %zu\n", exact, rows.size());
  EXPECT_GE(exact, 30);
}

}  // namespace
}  // namespace soartune::engine
