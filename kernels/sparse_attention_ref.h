// InfLLM-v2 sparse attention (MiniCPM-SALA's softmax layers above sparse_config.dense_len), fp32 on the CPU:
// the one implementation of the block selection (the CPU engine calls it through engine/sparse_attention.h)
// and the twin of the CUDA kernels in kernels/sparse_attention.cuh, over the paged KV cache.
//
// For a query at position p whose sequence has reached dense_len keys (p + 1 >= dense_len):
//   1. compressed keys: ck_i = mean of keys [i s, i s + w) (w = kernel_size, s = kernel_stride), for every
//      window that lies wholly at or before p (i s + w - 1 <= p); summed in key order, then times 1 / w;
//   2. per query head h of the group: softmax over i of q_h . ck_i / sqrt(d); the group's score of ck_i is
//      the sum of those probabilities over its heads in head order (one selection per KV head, shared by its
//      query heads);
//   3. block b (block_size tokens) scores the max over compressed indices [b r - 1, b r + r), r =
//      block_size / kernel_stride (max-pooling kernel r + 1, stride r, padding 1); blocks b < init_blocks and
//      the local blocks qb - window_size / block_size <= b <= qb (qb = p / block_size) score +inf;
//   4. the topk + window_size / block_size best blocks at or before qb are attended (ties: lower block);
//      attention itself is exact softmax over those blocks' tokens at positions <= p.
// When that count covers every block up to qb, or p + 1 < dense_len, the result is dense attention.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention_ref.h"

namespace soartune::kernels {

// The selection's parameters (the model's sparse_config with the launch's top-k / window).
struct SparseParams {
  int block_size = 64;      // tokens per key block
  int dense_len = 8192;     // kv length from which a query goes sparse
  int init_blocks = 1;      // leading blocks always attended
  int kernel_size = 32;     // compressed-key window
  int kernel_stride = 16;   // step between compressed-key windows
  int topk = 64;            // blocks chosen by score, besides the local window
  int window_size = 2048;   // local window in tokens
  int local_blocks() const { return window_size / block_size; }
  int keep() const { return topk + local_blocks(); }
};

// Blocks a query at position context - 1 may attend: 1 + (context - 1) / block_size.
inline int sparse_max_blocks(int context, int block_size) { return (context + block_size - 1) / block_size; }
// Compressed keys of a context of `keys` tokens.
inline int sparse_compressed_keys(int keys, const SparseParams& sp) {
  return keys < sp.kernel_size ? 0 : (keys - sp.kernel_size) / sp.kernel_stride + 1;
}
// Scratch floats sparse_select_blocks needs for a context of up to `context` tokens.
inline int sparse_scratch_floats(int context, const SparseParams& sp) {
  return 2 * (sparse_compressed_keys(context, sp) + 1) + sparse_max_blocks(context, sp.block_size);
}
// Whether the query at `pos` goes through the selection (else: dense over 0..pos).
inline bool sparse_query_selects(int pos, const SparseParams& sp) {
  return pos + 1 >= sp.dense_len && sp.keep() < pos / sp.block_size + 1;
}
// The longest block list of a query in a context of up to `context` tokens: keep() for a selecting query, every
// block up to its own for a dense one (those below dense_len have at most (dense_len - 2) / block_size + 1).
// The CUDA kernels size each token's list in their workspace by it.
inline int sparse_max_selected(int context, const SparseParams& sp) {
  const int below = (sp.dense_len < 2 ? 0 : sp.dense_len - 2) / sp.block_size + 1;
  const int longest = sp.keep() > below ? sp.keep() : below;
  const int blocks = sparse_max_blocks(context, sp.block_size);
  return blocks < longest ? blocks : longest;
}

// Mean-pools keys into compressed keys: ck [n][dim] for windows i = first..first+n-1 (row i - first), key(j) a
// [dim] row of key j.
template <typename KeyRow>
void sparse_compress_keys(const SparseParams& sp, int first, int n, int dim, KeyRow key, float* ck) {
  const float inv = 1.f / static_cast<float>(sp.kernel_size);
  for (int i = first; i < first + n; ++i) {
    float* c = ck + static_cast<std::size_t>(i - first) * dim;
    for (int e = 0; e < dim; ++e) c[e] = 0.f;
    for (int j = i * sp.kernel_stride; j < i * sp.kernel_stride + sp.kernel_size; ++j) {
      const float* k = key(j);
      for (int e = 0; e < dim; ++e) c[e] += k[e];
    }
    for (int e = 0; e < dim; ++e) c[e] *= inv;
  }
}

// The block scores of steps 2-3 for the query heads q [group][dim] at position pos, from the compressed keys
// ck [n_ck][dim] of its sequence: score [pos / block_size + 1] (+inf for forced blocks). `scratch`:
// sparse_scratch_floats(pos + 1, sp) floats (score may point into its tail).
void sparse_block_scores(const SparseParams& sp, const float* q, int group, int dim, const float* ck, int n_ck,
                         int pos, float* scratch, float* score);

// Step 3 alone: the block scores score [pos / block_size + 1] from the group's summed probabilities summed [nc]
// of the compressed keys visible at pos (nc of them).
void sparse_pool_block_scores(const SparseParams& sp, const float* summed, int nc, int pos, float* score);

// Step 4 alone: the min(keep, nblocks) best blocks by score [nblocks] in the strict order "higher score, then
// lower block" (scores compare as floats: -0 equals +0), written in ascending order to blocks [nblocks]; returns
// their count.
int sparse_keep_best_blocks(const float* score, int nblocks, int keep, int* blocks);

// Selects the blocks for the query heads q [group][dim] at position `pos` (steps 2-4; the caller decides
// dense_len), from the compressed keys ck [n_ck][dim] of its sequence (n_ck >= the windows visible at pos).
// Writes the chosen block indices in ascending order to `blocks` ([sparse_max_blocks(pos + 1)]) and returns
// their count. `scratch`: sparse_scratch_floats(pos + 1, sp).
int sparse_select_blocks(const SparseParams& sp, const float* q, int group, int dim, const float* ck, int n_ck,
                         int pos, float* scratch, int* blocks);

// Compressed keys [first, first + n) of KV head kv_head of one sequence (its block-table row `pages`) in the
// paged cache -> ck [n][head_dim].
void sparse_compress_paged_ref(const SparseParams& sp, const PagedKvView& kv, const int32_t* pages, int kv_head,
                               int first, int n, float* ck);

// The whole layer, as kernels/sparse_attention.cuh computes it: q [total_q][n_heads][head_dim] fp32, sequence
// b owning tokens q_offsets[b] .. q_offsets[b+1]-1 at positions prefix_lens[b] + j -> out same shape fp32.
// selected (optional) [total_q][n_kv_heads][max_selected] and counts [total_q][n_kv_heads] receive each
// token's attended blocks (ascending; dense tokens list 0..qb). softmax_scale 0 = 1 / sqrt(head_dim).
void sparse_attention_ref(const SparseParams& sp, const float* q, const PagedKvView& kv, const int32_t* block_table,
                          int block_table_stride, const int32_t* q_offsets, const int32_t* prefix_lens, int batch,
                          int n_heads, float softmax_scale, float* out, int max_selected = 0,
                          int32_t* selected = nullptr, int32_t* counts = nullptr);

}  // namespace soartune::kernels
