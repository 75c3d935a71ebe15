// The CPU engine against the training script's own fp32 PyTorch forward of the demo model that ships in the
// repository (configs/models/kjv-llama): teacher-forced top-1 and batched greedy continuations. The model is
// part of every clone, so these tests always run.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine_runs.h"
#include "tiny_model.h"

namespace soartune::engine {
namespace {

using testing::fp32_engine;
using testing::greedy_continuations;
using testing::read_jsonl;
using testing::teacher_forced_top1;

std::string kjv_dir() { return std::string(SOARTUNE_SOURCE_DIR) + "/configs/models/kjv-llama"; }

const ModelWeights& kjv() { return testing::shared_model("hf:" + kjv_dir()); }

TEST(KjvLlama, LoadsAsTiedLlama) {
  const ModelConfig& c = kjv().config;
  EXPECT_EQ(c.hidden, 256);
  EXPECT_EQ(c.layers, 4);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab, 4096);
  EXPECT_TRUE(c.tie_embeddings);   // no lm_head tensor in the checkpoint: the embeddings serve as lm_head
}

TEST(KjvLlama, TeacherForcedTop1MatchesFp32Reference) {
  const auto rows = read_jsonl(kjv_dir() + "/eval_public.jsonl");
  ASSERT_EQ(rows.size(), 64u);
  auto engine = fp32_engine(kjv(), 16, 1024);
  ASSERT_NE(engine, nullptr);
  const auto got = teacher_forced_top1(*engine, rows);
  int64_t match = 0, total = 0, off_tie = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto want = rows[r]["ref_fp32_teacher_forced_top1"].get<std::vector<int32_t>>();
    const auto ties = rows[r]["ref_fp32_teacher_forced_near_ties"].get<std::vector<int>>();
    ASSERT_EQ(got[r].size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (got[r][i] == want[i]) {
        ++match;
      } else if (std::find(ties.begin(), ties.end(), static_cast<int>(i)) == ties.end()) {
        ++off_tie;
        ADD_FAILURE() << "row " << r << " position " << i << ": engine " << got[r][i] << ", reference "
                      << want[i] << " (not a recorded near-tie)";
      }
    }
    total += static_cast<int64_t>(want.size());
  }
  const double pct = 100.0 * static_cast<double>(match) / static_cast<double>(total);
  std::printf("teacher-forced fp32 top-1 agreement: %.3f%% of %lld positions\n", pct, static_cast<long long>(total));
  EXPECT_GE(pct, 99.9);
  EXPECT_EQ(off_tie, 0);
}

TEST(KjvLlama, GreedyContinuationsMatchBatched) {
  const auto rows = read_jsonl(kjv_dir() + "/greedy_reference.jsonl");
  ASSERT_EQ(rows.size(), 32u);
  // 16 running at once out of 32 and a small chunk: sequences join and leave mid-flight, prompts split.
  auto engine = fp32_engine(kjv(), 16, 48);
  ASSERT_NE(engine, nullptr);
  const auto got = greedy_continuations(*engine, rows, "reference_greedy_fp32");
  int exact = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    const std::vector<int32_t>& out = got[r];
    const auto want = row["reference_greedy_fp32"].get<std::vector<int32_t>>();
    ASSERT_EQ(out.size(), want.size());
    const auto diverge = std::mismatch(out.begin(), out.end(), want.begin()).first - out.begin();
    if (diverge == static_cast<std::ptrdiff_t>(want.size())) {
      ++exact;
      continue;
    }
    // After a near-tie the two continuations may rightly part: both tokens were (almost) equally likely.
    const auto ties = row["near_ties"].get<std::vector<int>>();
    EXPECT_NE(std::find(ties.begin(), ties.end(), static_cast<int>(diverge)), ties.end())
        << "row " << r << " parts from the reference at token " << diverge << " (engine " << out[diverge]
        << ", reference " << want[diverge] << "), which is not a recorded near-tie";
  }
  std::printf("greedy continuations equal to the reference: %d of %zu\n", exact, rows.size());
}

}  // namespace
}  // namespace soartune::engine
