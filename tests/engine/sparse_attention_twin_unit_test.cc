// The CUDA sparse attention's CPU twin (kernels/sparse_attention_ref) against the CPU engine's path: compressed
// keys from the paged cache, the dense_len switch and the selection equal what the engine computes from plain
// key rows (engine/sparse_attention.h), and with every block kept the twin is dense attention.
#include <algorithm>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/sparse_attention.h"
#include "kernels/attention_ref.h"
#include "kernels/sparse_attention_ref.h"
#include "tests/kernels/attention_test_util.h"

namespace soartune::kernels {
namespace {

engine::SparseAttentionConfig engine_config(int topk, int window, int init, int dense_len) {
  engine::SparseAttentionConfig sp;
  sp.present = true;
  sp.block_size = 64;
  sp.kernel_size = 32;
  sp.kernel_stride = 16;
  sp.init_blocks = init;
  sp.window_size = window;
  sp.topk = topk;
  sp.dense_len = dense_len;
  return sp;
}

struct Case {
  int topk, window, init, dense_len;
};

TEST(SparseAttentionTwin, SelectsWhatTheEngineSelects) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int n_heads = 8, n_kv = 2, group = n_heads / n_kv, D = 64;
  // Two sequences: one prefilling across dense_len, one decoding far above it.
  const std::vector<int> prefix = {1000, 2900}, q_len = {120, 1};
  std::vector<int> ctx = {prefix[0] + q_len[0], prefix[1] + q_len[1]};
  const PagedKvLayout layout{n_kv, D, 16, KvCacheDtype::kBf16};
  const test::HostPagedCache cache = test::make_paged_cache(rng, layout, ctx);
  const std::vector<int32_t> q_offsets = {0, q_len[0], q_len[0] + q_len[1]}, prefix_lens = {prefix[0], prefix[1]};
  const int total_q = q_offsets.back();
  // Queries with a strong shared direction, so scores are far from uniform and the choice is not a tie.
  std::vector<float> q(static_cast<std::size_t>(total_q) * n_heads * D);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : q) x = 2.f * nd(rng);
  for (const Case c : {Case{4, 128, 1, 1024}, Case{8, 256, 2, 1060}, Case{16, 128, 1, 64}}) {
    const engine::SparseAttentionConfig esp = engine_config(c.topk, c.window, c.init, c.dense_len);
    const SparseParams sp = engine::sparse_params(esp);
    const int max_sel = sparse_max_blocks(ctx[1], 64);
    std::vector<int32_t> sel(static_cast<std::size_t>(total_q) * n_kv * max_sel), counts(static_cast<std::size_t>(total_q) * n_kv);
    std::vector<float> out(q.size());
    sparse_attention_ref(sp, q.data(), cache.view(), cache.block_table.data(), cache.block_table_stride,
                         q_offsets.data(), prefix_lens.data(), 2, n_heads, 0.f, out.data(), max_sel, sel.data(),
                         counts.data());
    int sparse_rows = 0;
    for (int b = 0; b < 2; ++b) {
      const int32_t* pages = cache.block_table.data() + b * cache.block_table_stride;
      for (int kvh = 0; kvh < n_kv; ++kvh) {
        // The engine's way: key rows as floats, then its compression and selection.
        std::vector<float> keys(static_cast<std::size_t>(ctx[b]) * D);
        for (int j = 0; j < ctx[b]; ++j)
          for (int d = 0; d < D; ++d)
            keys[static_cast<std::size_t>(j) * D + d] =
                kv_cache_value(cache.k.data(), layout.dtype, layout.offset(pages[j / 16], kvh, j % 16, d), 1.f);
        const int nck = engine::sparse_compressed_keys(ctx[b], esp);
        std::vector<float> ck(static_cast<std::size_t>(nck) * D);
        engine::sparse_compress_keys(esp, nck, D, [&](int j) { return &keys[static_cast<std::size_t>(j) * D]; }, ck.data());
        std::vector<float> scratch(static_cast<std::size_t>(engine::sparse_scratch_floats(ctx[b], esp)));
        std::vector<int> blocks(static_cast<std::size_t>(engine::sparse_max_blocks(ctx[b], 64)));
        for (int j = 0; j < q_len[b]; ++j) {
          const int t = q_offsets[b] + j, pos = prefix[b] + j;
          std::vector<int> want;
          if (pos + 1 >= esp.dense_len) {
            const int n = engine::sparse_select_blocks(esp, &q[(static_cast<std::size_t>(t) * n_heads + kvh * group) * D],
                                                       group, D, ck.data(), nck, pos, scratch.data(), blocks.data());
            want.assign(blocks.begin(), blocks.begin() + n);
            sparse_rows += sparse_query_selects(pos, sp);
          } else {
            for (int i = 0; i <= pos / 64; ++i) want.push_back(i);
          }
          const int64_t row = static_cast<int64_t>(t) * n_kv + kvh;
          const std::vector<int> got(sel.begin() + row * max_sel, sel.begin() + row * max_sel + counts[static_cast<std::size_t>(row)]);
          ASSERT_EQ(got, want) << "token " << t << " kv head " << kvh << " topk " << c.topk;
        }
      }
    }
    EXPECT_GT(sparse_rows, 0) << "the case must exercise the selection";
  }
}

TEST(SparseAttentionTwin, KeepingEveryBlockIsDenseAttention) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int n_heads = 4, n_kv = 1, D = 64;
  const std::vector<int> ctx = {700};
  const PagedKvLayout layout{n_kv, D, 16, KvCacheDtype::kBf16};
  const test::HostPagedCache cache = test::make_paged_cache(rng, layout, ctx);
  const std::vector<int32_t> q_offsets = {0, 40}, prefix_lens = {660};
  std::vector<float> q(static_cast<std::size_t>(40) * n_heads * D);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : q) x = nd(rng);
  SparseParams sp;
  sp.dense_len = 64;
  sp.topk = 4;
  sp.window_size = 7 * 64;   // 4 + 7 = 11 blocks = every block of 700 tokens
  std::vector<float> sparse(q.size()), dense(q.size());
  sparse_attention_ref(sp, q.data(), cache.view(), cache.block_table.data(), cache.block_table_stride, q_offsets.data(),
                       prefix_lens.data(), 1, n_heads, 0.f, sparse.data());
  prefill_attention_ref(q.data(), cache.view(), cache.block_table.data(), cache.block_table_stride, q_offsets.data(),
                        prefix_lens.data(), 1, n_heads, 0.f, dense.data());
  EXPECT_LT(test::normalised_error(sparse, dense), 1e-6);
  // One block fewer: the twin leaves blocks out and the output moves away from dense.
  sp.window_size = 5 * 64;
  sparse_attention_ref(sp, q.data(), cache.view(), cache.block_table.data(), cache.block_table_stride, q_offsets.data(),
                       prefix_lens.data(), 1, n_heads, 0.f, sparse.data());
  EXPECT_GT(test::normalised_error(sparse, dense), 1e-3);
}

// The CUDA kernels keep each token's block list in sparse_max_selected(context) slots of their workspace: no
// query of the context may list more, selecting or dense, whatever dense_len, top-k and window are, and the
// bound is reached (a larger one only wastes workspace).
TEST(SparseAttentionTwin, EveryBlockListFitsTheKernelsBound) {
  const int dim = 4, group = 2, context = 3000;
  for (const Case c : {Case{4, 128, 1, 1024}, Case{64, 2048, 1, 8192}, Case{16, 512, 1, 1}, Case{8, 0, 2, 65},
                       Case{8, 256, 1, 66}, Case{2, 64, 1, 2999}, Case{1, 0, 1, 3000}}) {
    SparseParams sp;
    sp.topk = c.topk;
    sp.window_size = c.window;
    sp.init_blocks = c.init;
    sp.dense_len = c.dense_len;
    const int bound = sparse_max_selected(context, sp);
    const int nck = sparse_compressed_keys(context, sp);
    std::vector<float> q(static_cast<std::size_t>(group) * dim, 1.f), ck(static_cast<std::size_t>(nck) * dim, 0.5f);
    std::vector<float> scratch(static_cast<std::size_t>(sparse_scratch_floats(context, sp)));
    std::vector<int> blocks(static_cast<std::size_t>(sparse_max_blocks(context, sp.block_size)));
    int longest = 0;
    for (int pos = 0; pos < context; ++pos) {
      const int n = pos + 1 >= sp.dense_len
                        ? sparse_select_blocks(sp, q.data(), group, dim, ck.data(), nck, pos, scratch.data(), blocks.data())
                        : pos / sp.block_size + 1;
      ASSERT_LE(n, bound) << "pos " << pos << " topk " << c.topk << " window " << c.window << " dense_len " << c.dense_len;
      longest = std::max(longest, n);
    }
    EXPECT_EQ(longest, bound) << "topk " << c.topk << " window " << c.window << " dense_len " << c.dense_len;
  }
}

}  // namespace
}  // namespace soartune::kernels
