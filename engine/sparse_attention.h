// InfLLM-v2 block selection (MiniCPM-SALA's sparse attention of the softmax layers, sparse_config) as the
// engine sees it, over its SparseAttentionConfig; the arithmetic is kernels/sparse_attention_ref's.
//
// For a query at position p whose sequence has reached dense_len keys (p + 1 >= dense_len):
//   1. compressed keys: ck_i = mean of keys [i s, i s + w) (w = kernel_size, s = kernel_stride), for every
//      window that lies wholly at or before p (i s + w - 1 <= p);
//   2. per query head h of the group: softmax over i of q_h . ck_i / sqrt(d); the group's score of ck_i is
//      the sum of those probabilities over its heads (one selection per KV head, shared by its query heads);
//   3. block b (block_size tokens) scores the max over compressed indices [b r - 1, b r + r), r =
//      block_size / kernel_stride (max-pooling kernel r + 1, stride r, padding 1); blocks b < init_blocks and
//      the local blocks qb - window_size / block_size <= b <= qb (qb = p / block_size) score +inf;
//   4. the topk + window_size / block_size best blocks at or before qb are attended (ties: lower block);
//      attention itself is exact softmax over those blocks' tokens at positions <= p.
// When that count covers every block up to qb the result is dense attention.
// The switch to sparse is made per query token here, so it does not depend on how a prompt is chunked. The
// official HF code decides per forward call (kv length = largest position + 1) and SGLang per sequence of a
// batch (its length >= dense_len); the three agree except for queries at positions in
// [(topk + window_size / block_size) * block_size, dense_len - 1) of a call that reaches dense_len, which
// they send through the selection and this code attends densely (release: positions 6144 .. 8190).
#pragma once

#include <string>

#include "core/status.h"
#include "engine/model_config.h"
#include "kernels/sparse_attention_ref.h"

namespace soartune::engine {

// The selection lives in kernels/sparse_attention_ref (one implementation, shared with the CUDA kernels' twin).
inline kernels::SparseParams sparse_params(const SparseAttentionConfig& sp) {
  kernels::SparseParams p;
  p.block_size = sp.block_size;
  p.dense_len = sp.dense_len;
  p.init_blocks = sp.init_blocks;
  p.kernel_size = sp.kernel_size;
  p.kernel_stride = sp.kernel_stride;
  p.topk = sp.topk;
  p.window_size = sp.window_size;
  return p;
}

// The selection a launch runs: the model's sparse_config with the launch knobs over it (topk > 0, window > 0
// replace the model's), checked: the window whole blocks, and topk above init_blocks, since the initial blocks
// and the local window (own block included) score +inf and must all fit in the topk + window kept, or the
// lowest-index tie-break would drop the query's own block. One rule for both backends.
inline Result<SparseAttentionConfig> sparse_config_for_launch(const SparseAttentionConfig& model, int topk, int window) {
  SparseAttentionConfig sc = model;
  if (topk > 0) sc.topk = topk;
  if (window > 0) sc.window_size = window;
  if (!sc.present) return sc;
  if (window > 0 && window % sc.block_size != 0)
    return Status::Invalid("launch.sparse_window: " + std::to_string(window) +
                           " is not a multiple of the model's sparse block_size " + std::to_string(sc.block_size));
  if (sc.topk <= sc.init_blocks)
    return Status::Invalid(std::string(topk > 0 ? "launch.sparse_topk: " : "config.json sparse_config.topk: ") +
                           std::to_string(sc.topk) + " must exceed the model's sparse_config.init_blocks " +
                           std::to_string(sc.init_blocks) + " (the initial blocks count within topk)");
  return sc;
}

// Blocks a query attends to: 1 + p / block_size at most.
inline int sparse_max_blocks(int context, int block_size) { return kernels::sparse_max_blocks(context, block_size); }
// Compressed keys of a context of `keys` tokens.
inline int sparse_compressed_keys(int keys, const SparseAttentionConfig& sp) {
  return kernels::sparse_compressed_keys(keys, sparse_params(sp));
}
// Scratch floats sparse_select_blocks needs for a context of up to `context` tokens.
inline int sparse_scratch_floats(int context, const SparseAttentionConfig& sp) {
  return kernels::sparse_scratch_floats(context, sparse_params(sp));
}

// Mean-pools keys into compressed keys: ck [n][dim] for windows i = 0..n-1, key(j) a [dim] row of key j.
template <typename KeyRow>
void sparse_compress_keys(const SparseAttentionConfig& sp, int n, int dim, KeyRow key, float* ck) {
  kernels::sparse_compress_keys(sparse_params(sp), 0, n, dim, key, ck);
}

// Selects the blocks for the query heads q [group][dim] at position `pos`, from the compressed keys ck
// [n_ck][dim] of its sequence (n_ck >= the windows visible at pos). Writes the chosen block indices in
// ascending order to `blocks` ([sparse_max_blocks(pos + 1)]) and returns their count. `scratch`:
// sparse_scratch_floats(pos + 1, sp).
inline int sparse_select_blocks(const SparseAttentionConfig& sp, const float* q, int group, int dim, const float* ck,
                                int n_ck, int pos, float* scratch, int* blocks) {
  return kernels::sparse_select_blocks(sparse_params(sp), q, group, dim, ck, n_ck, pos, scratch, blocks);
}

}  // namespace soartune::engine
