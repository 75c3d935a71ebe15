// Decode attention over the paged KV cache: one query token per sequence, split-KV flash-decoding.
//
// KV layout (kernels/attention_paged.h), per layer, K and V separately:
//   cache[num_pages][n_kv_heads][page_size][head_dim]   (bf16 | fp16 | fp8_e4m3 | fp8_e5m2)
//   token t of sequence b -> page block_table[b * block_table_stride + t / page_size], slot t % page_size
//   fp8: value = decode(byte) * k_scale (v_scale for V)
// q   [batch][n_heads][head_dim], sequence b at q + b * q_stride (elements), act dtype
// out [batch][n_heads][head_dim], sequence b at out + b * out_stride, act dtype
// Query head h reads KV head h / (n_heads / n_kv_heads).
//
// Work: one CTA per (sequence, KV head, split) serves all n_heads / n_kv_heads query heads of that KV head,
// so each K/V byte is read once per step; with kv_splits > 1 every split writes an unnormalised partial
// (fp32 output + log-sum-exp) to the workspace and a combine kernel merges them.
// Bytes per call: sum_b seq_len_b * n_kv_heads * head_dim * 2 (K and V) * kv_dtype_bytes
//   + batch * n_heads * head_dim * act bytes * 2, plus the workspace round trip when kv_splits > 1.
// FLOPs per call: 4 * sum_b seq_len_b * n_heads * head_dim.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/kernel_variants.h"
#include "kernels/attention_paged.h"

namespace soartune::kernels {

struct DecodeAttentionArgs {
  const void* q = nullptr;              // device, see layout above
  void* out = nullptr;                  // device
  const void* k_cache = nullptr;        // device, one layer
  const void* v_cache = nullptr;        // device, one layer
  const int32_t* block_table = nullptr; // device [batch][block_table_stride] page ids
  const int32_t* seq_lens = nullptr;    // device [batch]: KV tokens of each sequence, the current one
                                        // included; 0 gives an all-zero output row (padding slots)
  int batch = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;                     // 64, 128 or 256
  int page_size = 0;                    // 1..1024 tokens per page
  int block_table_stride = 0;           // entries per block-table row
  int max_seq_len = 0;                  // host upper bound of seq_lens (chooses the split count when it is 0)
  int64_t q_stride = 0;                 // elements between sequences' q; 0 = n_heads * head_dim
  int64_t out_stride = 0;               // elements between sequences' out; 0 = n_heads * head_dim
  KvCacheDtype kv_dtype = KvCacheDtype::kBf16;
  ActDtype act_dtype = ActDtype::kBf16;
  float softmax_scale = 0.f;            // 0 = 1 / sqrt(head_dim)
  float k_scale = 1.f;
  float v_scale = 1.f;
};

// The launch, fixed before the run. A plan stays valid for any seq_lens (each sequence's tokens are
// divided at run time into page-aligned ranges over as many of the kv_splits as give each range at least 64
// tokens, 128 for SIMT; the other splits exit empty), so a captured graph may replay it as contexts grow.
struct DecodeAttentionPlan {
  int kv_splits = 1;         // KV ranges per (sequence, KV head)
  int group_size = 1;        // query heads per KV head
  int heads_per_cta = 1;     // query heads one CTA serves (group_size up to 8; larger groups are cut in chunks)
  int grid_x = 0;            // kv_splits
  int grid_y = 0;            // n_kv_heads * ceil(group_size / heads_per_cta)
  int grid_z = 0;            // batch
  int threads = 0;
  bool tensor_cores = false; // mma.sync variant (head_dim 64 / 128 on sm_80+, the default) or SIMT fp32
  bool mma_ahead = false;    // tensor cores: each warp loads its next 16-token slice while multiplying this one
                             // (the plan sets it with tensor_cores: faster or equal in every case measured)
  size_t workspace_bytes = 0;  // device scratch run() needs (0 when kv_splits == 1)
};

// "" when the kernels implement args (dtype, head_dim, page size, head counts, pointers); else a message
// naming the field and the allowed values.
std::string decode_attention_can_implement(const DecodeAttentionArgs& args);

// The most KV splits a plan may use (decode_kv_splits knob: core::kDecodeKvSplits).
using core::kDecodeMaxKvSplits;

// Fills *plan. requested_splits: the decode_kv_splits knob, one of core::kDecodeKvSplits; 0 chooses from
// max_seq_len, batch * n_kv_heads and sm_count (tensor cores: at most two CTAs per SM, at least 64 tokens per
// split; SIMT: about three CTAs per SM, at least 128 tokens per split).
// allow_tensor_cores = false forces the SIMT variant (the tensor-core one needs head_dim 64 or 128 and code
// built for sm_80+). Returns "" or an error message (can_implement's, or a bad requested_splits).
std::string decode_attention_plan(const DecodeAttentionArgs& args, int requested_splits, int sm_count,
                                  DecodeAttentionPlan* plan, bool allow_tensor_cores = true);

// Launches only (no allocation, no sync). workspace: plan.workspace_bytes of device memory, 16-byte
// aligned (may be null when that is 0). Returns the launch error, if any.
cudaError_t decode_attention_run(const DecodeAttentionArgs& args, const DecodeAttentionPlan& plan,
                                 void* workspace, cudaStream_t stream);

}  // namespace soartune::kernels
