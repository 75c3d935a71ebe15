// InfLLM-v2 sparse attention: the block selection on constructed scores, and the CPU backend on a synthetic
// MiniCPM-SALA with dense_len lowered: equal to dense attention when the selection covers every block,
// different from it when it does not, and decoding token by token as it prefills.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine/sparse_attention.h"
#include "engine_runs.h"

namespace soartune::engine {
namespace {

SparseAttentionConfig small_config() {
  SparseAttentionConfig sp;
  sp.present = true;
  sp.block_size = 64;
  sp.kernel_size = 32;
  sp.kernel_stride = 16;
  sp.init_blocks = 1;
  sp.window_size = 128;   // 2 local blocks besides the query's own
  sp.topk = 4;            // 6 blocks kept: init 0, local 8..10, and the 2 best others
  sp.dense_len = 256;
  return sp;
}

TEST(SparseAttention, SelectsInitialLocalAndBestScoringBlocks) {
  const SparseAttentionConfig sp = small_config();
  const int dim = 4, group = 2, pos = 64 * 10 + 5;
  const int nck = sparse_compressed_keys(pos + 1, sp);
  ASSERT_EQ(nck, (pos + 1 - 32) / 16 + 1);
  std::vector<float> ck(static_cast<std::size_t>(nck) * dim, 0.f), q(static_cast<std::size_t>(group) * dim, 0.f);
  q[0] = q[dim] = 2.f;
  ck[13 * dim] = 5.f;   // compressed window 13 pools into block 3 only (block b pools windows 4b-1 .. 4b+3)
  ck[24 * dim] = 3.f;   // window 24: block 6
  ck[2 * dim] = 9.f;    // window 2: block 0, already kept as the initial block
  std::vector<float> scratch(static_cast<std::size_t>(sparse_scratch_floats(pos + 1, sp)));
  std::vector<int> blocks(static_cast<std::size_t>(sparse_max_blocks(pos + 1, sp.block_size)));
  const int n = sparse_select_blocks(sp, q.data(), group, dim, ck.data(), nck, pos, scratch.data(), blocks.data());
  EXPECT_EQ(std::vector<int>(blocks.begin(), blocks.begin() + n), (std::vector<int>{0, 3, 6, 8, 9, 10}));
  // A window on a block edge pools into both blocks: window 19 ties blocks 4 and 5; the lower one is kept.
  ck[24 * dim] = 0.f;
  ck[19 * dim] = 4.f;
  const int n2 = sparse_select_blocks(sp, q.data(), group, dim, ck.data(), nck, pos, scratch.data(), blocks.data());
  EXPECT_EQ(std::vector<int>(blocks.begin(), blocks.begin() + n2), (std::vector<int>{0, 3, 4, 8, 9, 10}));
  // Early in the sequence every block is kept.
  const int n3 = sparse_select_blocks(sp, q.data(), group, dim, ck.data(), nck, 64 * 4 + 1, scratch.data(), blocks.data());
  EXPECT_EQ(std::vector<int>(blocks.begin(), blocks.begin() + n3), (std::vector<int>{0, 1, 2, 3, 4}));
}

// Every position's logits of one sequence, prefilled in chunks of `chunk` (1 = token by token).
std::vector<float> logits_of(const ModelWeights& w, const std::vector<int32_t>& ids, int chunk) {
  return testing::cpu_logits(w, ids, {}, chunk);
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b, std::size_t from = 0) {
  double m = 0;
  for (std::size_t i = from; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

TEST(SparseAttention, CpuBackendOnALongContextWithDenseLenLowered) {
  auto loaded = load_model("synthetic:tiny-sala", 9);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message;
  ModelWeights dense = std::move(loaded).value();
  dense.config.sparse.present = false;
  std::vector<int32_t> ids;
  uint32_t x = 99;
  for (int i = 0; i < 560; ++i) ids.push_back(2 + static_cast<int32_t>((x = x * 1664525u + 1013904223u) >> 8) % 4000);
  const std::vector<float> want = logits_of(dense, ids, 560);

  ModelWeights covering = dense;   // sparse from position 255 on, but topk covers all 9 blocks
  covering.config.sparse = small_config();
  covering.config.sparse.topk = 9;
  EXPECT_LE(max_diff(logits_of(covering, ids, 560), want), 1e-5);

  ModelWeights sparse = dense;     // 6 of up to 9 blocks
  sparse.config.sparse = small_config();
  const std::vector<float> got = logits_of(sparse, ids, 560);
  const std::size_t V = static_cast<std::size_t>(dense.config.vocab);
  // Identical while every block is kept (positions < 6 * 64), different after.
  const double before = max_diff(std::vector<float>(got.begin(), got.begin() + 384 * V), std::vector<float>(want.begin(), want.begin() + 384 * V));
  const double after = max_diff(got, want, 384 * V);
  std::printf("sparse vs dense logits: max diff %.3g before position 384, %.3g from it\n", before, after);
  EXPECT_EQ(before, 0.0);
  // Random weights attend almost uniformly, so dropping blocks moves the logits little, but far above rounding.
  EXPECT_GT(after, 1e-4);
  // The switch is per token: chunked prefill and decode select the same blocks as one prefill.
  EXPECT_LE(max_diff(logits_of(sparse, ids, 100), got), 1e-4);
}

}  // namespace
}  // namespace soartune::engine
