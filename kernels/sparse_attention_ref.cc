#include "kernels/sparse_attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace soartune::kernels {

void sparse_block_scores(const SparseParams& sp, const float* q, int group, int dim, const float* ck, int n_ck,
                         int pos, float* scratch, float* score) {
  // Compressed keys wholly at or before pos.
  const int nc = std::min(n_ck, sparse_compressed_keys(pos + 1, sp));
  float* summed = scratch;                       // [nc] group's score per compressed key
  float* logits = summed + nc + 1;               // [nc] one head's logits
  std::fill(summed, summed + nc, 0.f);
  const float scale = 1.f / std::sqrt(static_cast<float>(dim));
  for (int h = 0; h < group; ++h) {
    const float* qh = q + static_cast<std::size_t>(h) * dim;
    float mx = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < nc; ++i) {
      const float* c = ck + static_cast<std::size_t>(i) * dim;
      float dot = 0.f;
      for (int e = 0; e < dim; ++e) dot += qh[e] * c[e];
      logits[i] = dot * scale;
      mx = std::max(mx, logits[i]);
    }
    float sum = 0.f;
    for (int i = 0; i < nc; ++i) sum += (logits[i] = std::exp(logits[i] - mx));
    for (int i = 0; i < nc; ++i) summed[i] += logits[i] / sum;
  }
  sparse_pool_block_scores(sp, summed, nc, pos, score);
}

void sparse_pool_block_scores(const SparseParams& sp, const float* summed, int nc, int pos, float* score) {
  const int qb = pos / sp.block_size;
  const int nblocks = qb + 1;
  const int local = sp.local_blocks();
  const int r = sp.block_size / sp.kernel_stride;
  const float inf = std::numeric_limits<float>::infinity();
  for (int b = 0; b < nblocks; ++b) {
    if (b < sp.init_blocks || b >= qb - local) {
      score[b] = inf;
      continue;
    }
    float m = -inf;
    for (int i = std::max(0, b * r - 1); i < std::min(nc, b * r + r); ++i) m = std::max(m, summed[i]);
    score[b] = m;
  }
}

int sparse_keep_best_blocks(const float* score, int nblocks, int keep, int* blocks) {
  keep = std::min(keep, nblocks);
  for (int b = 0; b < nblocks; ++b) blocks[b] = b;
  std::partial_sort(blocks, blocks + keep, blocks + nblocks, [&](int a, int b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  std::sort(blocks, blocks + keep);
  return keep;
}

int sparse_select_blocks(const SparseParams& sp, const float* q, int group, int dim, const float* ck, int n_ck,
                         int pos, float* scratch, int* blocks) {
  const int nblocks = pos / sp.block_size + 1;
  const int keep = sp.keep();
  if (keep >= nblocks) {           // every block: dense
    for (int b = 0; b < nblocks; ++b) blocks[b] = b;
    return nblocks;
  }
  const int nc = std::min(n_ck, sparse_compressed_keys(pos + 1, sp));
  float* score = scratch + 2 * (nc + 1);         // [nblocks]
  sparse_block_scores(sp, q, group, dim, ck, n_ck, pos, scratch, score);
  return sparse_keep_best_blocks(score, nblocks, keep, blocks);
}

void sparse_compress_paged_ref(const SparseParams& sp, const PagedKvView& kv, const int32_t* pages, int kv_head,
                               int first, int n, float* ck) {
  const PagedKvLayout& L = kv.layout;
  std::vector<float> row(static_cast<std::size_t>(L.head_dim));
  sparse_compress_keys(sp, first, n, L.head_dim, [&](int j) {
    const int64_t base = L.offset(pages[j / L.page_size], kv_head, j % L.page_size, 0);
    for (int d = 0; d < L.head_dim; ++d) row[static_cast<std::size_t>(d)] = kv_cache_value(kv.k, L.dtype, base + d, kv.k_scale);
    return row.data();
  }, ck);
}

void sparse_attention_ref(const SparseParams& sp, const float* q, const PagedKvView& kv, const int32_t* block_table,
                          int block_table_stride, const int32_t* q_offsets, const int32_t* prefix_lens, int batch,
                          int n_heads, float softmax_scale, float* out, int max_selected, int32_t* selected,
                          int32_t* counts) {
  const PagedKvLayout& L = kv.layout;
  const int D = L.head_dim, n_kv = L.n_kv_heads, group = n_heads / n_kv;
  const float scale = softmax_scale > 0.f ? softmax_scale : 1.f / std::sqrt(static_cast<float>(D));
  for (int b = 0; b < batch; ++b) {
    const int32_t* pages = block_table + static_cast<int64_t>(b) * block_table_stride;
    const int q0 = q_offsets[b], q_len = q_offsets[b + 1] - q0, context = prefix_lens[b] + q_len;
    const int nck = sparse_compressed_keys(context, sp);
    std::vector<float> scratch(static_cast<std::size_t>(sparse_scratch_floats(context, sp)));
    std::vector<int> blocks(static_cast<std::size_t>(sparse_max_blocks(context, sp.block_size)));
    std::vector<float> s(static_cast<std::size_t>(context)), kf(static_cast<std::size_t>(D));
    for (int kvh = 0; kvh < n_kv; ++kvh) {
      std::vector<float> ck(static_cast<std::size_t>(nck) * D);
      sparse_compress_paged_ref(sp, kv, pages, kvh, 0, nck, ck.data());
      for (int j = 0; j < q_len; ++j) {
        const int t = q0 + j, pos = prefix_lens[b] + j;
        const float* qg = q + (static_cast<int64_t>(t) * n_heads + kvh * group) * D;
        int n_blocks = pos / sp.block_size + 1;
        if (pos + 1 >= sp.dense_len) {
          n_blocks = sparse_select_blocks(sp, qg, group, D, ck.data(), nck, pos, scratch.data(), blocks.data());
        } else {
          for (int i = 0; i < n_blocks; ++i) blocks[static_cast<std::size_t>(i)] = i;
        }
        if (selected) {
          const int64_t row = static_cast<int64_t>(t) * n_kv + kvh;
          counts[row] = n_blocks;
          for (int i = 0; i < n_blocks && i < max_selected; ++i) selected[row * max_selected + i] = blocks[static_cast<std::size_t>(i)];
        }
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
          const float* qh = q + (static_cast<int64_t>(t) * n_heads + h) * D;
          float mx = -INFINITY;
          int n = 0;
          for (int bi = 0; bi < n_blocks; ++bi)
            for (int k = blocks[static_cast<std::size_t>(bi)] * sp.block_size;
                 k <= std::min(pos, (blocks[static_cast<std::size_t>(bi)] + 1) * sp.block_size - 1); ++k) {
              const int64_t base = L.offset(pages[k / L.page_size], kvh, k % L.page_size, 0);
              float dot = 0.f;
              for (int d = 0; d < D; ++d) dot += qh[d] * kv_cache_value(kv.k, L.dtype, base + d, kv.k_scale);
              s[static_cast<std::size_t>(n)] = dot * scale;
              mx = std::max(mx, s[static_cast<std::size_t>(n++)]);
            }
          double sum = 0.0;
          for (int i = 0; i < n; ++i) sum += (s[static_cast<std::size_t>(i)] = std::exp(s[static_cast<std::size_t>(i)] - mx));
          std::vector<double> acc(static_cast<std::size_t>(D), 0.0);
          n = 0;
          for (int bi = 0; bi < n_blocks; ++bi)
            for (int k = blocks[static_cast<std::size_t>(bi)] * sp.block_size;
                 k <= std::min(pos, (blocks[static_cast<std::size_t>(bi)] + 1) * sp.block_size - 1); ++k) {
              const int64_t base = L.offset(pages[k / L.page_size], kvh, k % L.page_size, 0);
              const double p = s[static_cast<std::size_t>(n++)];
              for (int d = 0; d < D; ++d) acc[static_cast<std::size_t>(d)] += p * kv_cache_value(kv.v, L.dtype, base + d, kv.v_scale);
            }
          float* o = out + (static_cast<int64_t>(t) * n_heads + h) * D;
          for (int d = 0; d < D; ++d) o[d] = static_cast<float>(acc[static_cast<std::size_t>(d)] / sum);
        }
      }
    }
  }
}

}  // namespace soartune::kernels
