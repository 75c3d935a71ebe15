// The twin's top-k step (sparse_keep_best_blocks) and pooling step (sparse_pool_block_scores), which the GPU
// select kernel is compared against row by row, on hand-made scores: the rule is "keep a block iff fewer than
// keep blocks rank above it" (higher score, then lower block), written out here as a rank count.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/sparse_attention_ref.h"

namespace soartune::kernels {
namespace {

// Ascending blocks with fewer than keep blocks ranking above them, by counting.
std::vector<int> by_rank(const std::vector<float>& score, int keep) {
  std::vector<int> kept;
  const int n = static_cast<int>(score.size());
  for (int k = 0; k < n; ++k) {
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += score[j] > score[k] || (score[j] == score[k] && j < k);
    if (rank < keep) kept.push_back(k);
  }
  return kept;
}

std::vector<int> keep_best(const std::vector<float>& score, int keep) {
  std::vector<int> blocks(score.size());
  const int n = sparse_keep_best_blocks(score.data(), static_cast<int>(score.size()), keep, blocks.data());
  blocks.resize(n);
  return blocks;
}

TEST(SparseKeepBest, TiesGoToTheLowerBlockAndZerosOfBothSignsTie) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(keep_best({0.5f, 0.5f, 0.5f, 0.5f}, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(keep_best({-0.f, 0.f, -0.f, 0.f, 1.f}, 3), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(keep_best({inf, 0.2f, inf, inf, 0.9f}, 2), (std::vector<int>{0, 2}));   // more forced blocks than keep
  EXPECT_EQ(keep_best({-inf, -inf, 0.1f}, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(keep_best({0.3f, 0.1f}, 5), (std::vector<int>{0, 1}));                   // fewer blocks than keep
  EXPECT_EQ(keep_best({0.3f, 0.1f}, 0), (std::vector<int>{}));
}

TEST(SparseKeepBest, EqualsTheRankCountOnRandomScoresWithTies) {
  std::mt19937_64 rng(7);
  for (int it = 0; it < 300; ++it) {
    const int n = 1 + static_cast<int>(rng() % 300), keep = static_cast<int>(rng() % (n + 5));
    const int levels = 1 + static_cast<int>(rng() % 6);
    std::vector<float> score(n);
    for (float& x : score) {
      x = static_cast<float>(rng() % levels) * 0.25f;
      if (x == 0.f && rng() % 2) x = -0.f;
      if (rng() % 20 == 0) x = rng() % 2 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
    }
    ASSERT_EQ(keep_best(score, keep), by_rank(score, keep)) << "n " << n << " keep " << keep;
  }
}

TEST(SparsePoolBlockScores, MaxPoolsWithPaddingOneAndForcesInitialAndLocalBlocks) {
  SparseParams sp;
  sp.block_size = 64;
  sp.kernel_stride = 16;   // r = 4 compressed keys a block; block b pools [4b - 1, 4b + 4)
  sp.init_blocks = 1;
  sp.window_size = 128;    // 2 local blocks besides the own
  const int pos = 64 * 6 + 10;   // qb 6: blocks 4, 5, 6 local, block 0 initial
  std::vector<float> summed(24);
  for (int i = 0; i < 24; ++i) summed[i] = 0.01f * static_cast<float>(i % 5);
  summed[7] = 0.9f;   // the last key of block 1 and the padding key of block 2
  std::vector<float> score(7);
  sparse_pool_block_scores(sp, summed.data(), 24, pos, score.data());
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(score[0], inf);
  EXPECT_EQ(score[1], 0.9f);
  EXPECT_EQ(score[2], 0.9f);
  EXPECT_EQ(score[3], 0.04f);   // keys 11..15: 0.01, 0.02, 0.03, 0.04, 0
  EXPECT_EQ(score[4], inf);
  EXPECT_EQ(score[6], inf);
}

}  // namespace
}  // namespace soartune::kernels
