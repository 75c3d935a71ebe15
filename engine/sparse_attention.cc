#include "engine/sparse_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace soartune::engine {

int sparse_select_blocks(const SparseAttentionConfig& sp, const float* q, int group, int dim, const float* ck, int n_ck,
                         int pos, float* scratch, int* blocks) {
  const int qb = pos / sp.block_size;
  const int nblocks = qb + 1;
  const int local = sp.window_size / sp.block_size;
  const int keep = sp.topk + local;
  if (keep >= nblocks) {           // every block: dense
    for (int b = 0; b < nblocks; ++b) blocks[b] = b;
    return nblocks;
  }
  // Compressed keys wholly at or before pos.
  const int nc = std::min(n_ck, sparse_compressed_keys(pos + 1, sp));
  float* summed = scratch;                       // [nc] group's score per compressed key
  float* logits = summed + nc + 1;               // [nc] one head's logits
  float* score = logits + nc + 1;                // [nblocks]
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
  // The `keep` best blocks, ties to the lower index, then in ascending order.
  for (int b = 0; b < nblocks; ++b) blocks[b] = b;
  std::partial_sort(blocks, blocks + keep, blocks + nblocks, [&](int a, int b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  std::sort(blocks, blocks + keep);
  return keep;
}

}  // namespace soartune::engine
