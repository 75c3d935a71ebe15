// Causal prefill attention over the paged KV cache, for chunked prefill of a batch of sequences.
//
// KV layout: kernels/attention_paged.h (and the top of attention_decode.cuh). The chunk's own K/V must
// already be in the cache (the RoPE + KV-write kernel runs first).
// q   [total_q][n_heads][head_dim], token i at q + i * q_stride (elements), act dtype; sequence b owns
//     tokens q_offsets[b] .. q_offsets[b+1]-1
// out same shape, token i at out + i * out_stride
// Query j of sequence b sits at position prefix_lens[b] + j and attends to KV tokens 0 .. prefix_lens[b] + j
// of that sequence (prefix_lens[b] = tokens cached before this chunk, 0 for a fresh prompt).
//
// Work: one CTA per (block of prefill_attn_block query rows, query head, sequence), KV tiles through shared
// memory, online softmax in fp32, the causal bound cutting the KV loop short. Two variants:
//   tensor cores (head_dim 64, 128): mma.sync m16n8k16 with fp32 accumulators, one warp per 16 query rows,
//     KV tiles of 64 tokens; bf16 caches multiply in bf16, fp16 and fp8 caches in fp16 (fp8 widens exactly);
//     q and P are rounded to that type.
//   SIMT (any head_dim, or when tensor cores are not allowed): fp32 FMAs, KV tiles of 32 tokens.
// Bytes per call: q + out + per CTA the KV it covers (mostly from L2: the n_heads / n_kv_heads heads of a
//   group and the query blocks of a sequence share it).
// FLOPs per call: about 2 * 2 * n_heads * head_dim * sum_b q_len_b * (prefix_lens[b] + (q_len_b + 1) / 2).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/kernel_variants.h"
#include "kernels/attention_paged.h"

namespace soartune::kernels {

struct PrefillAttentionArgs {
  const void* q = nullptr;               // device
  void* out = nullptr;                   // device
  const void* k_cache = nullptr;         // device, one layer
  const void* v_cache = nullptr;         // device, one layer
  const int32_t* block_table = nullptr;  // device [batch][block_table_stride]
  const int32_t* q_offsets = nullptr;    // device [batch + 1], cumulative query tokens, q_offsets[0] = 0
  const int32_t* prefix_lens = nullptr;  // device [batch], tokens cached before this chunk
  int batch = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;                      // 64, 128 or 256
  int page_size = 0;                     // 1..1024
  int block_table_stride = 0;
  int max_q_len = 0;                     // host upper bound of q_offsets[b+1] - q_offsets[b]
  int64_t q_stride = 0;                  // 0 = n_heads * head_dim
  int64_t out_stride = 0;                // 0 = n_heads * head_dim
  KvCacheDtype kv_dtype = KvCacheDtype::kBf16;
  ActDtype act_dtype = ActDtype::kBf16;
  float softmax_scale = 0.f;             // 0 = 1 / sqrt(head_dim)
  float k_scale = 1.f;
  float v_scale = 1.f;
};

struct PrefillAttentionPlan {
  int block_m = 64;          // query rows per CTA (prefill_attn_block knob: core::kPrefillAttnBlocks)
  bool tensor_cores = true;  // mma.sync variant or SIMT fp32; the plan picks tensor cores when allowed,
                             // head_dim <= 128 and the build holds sm_80+ code for the device
  int block_n = 64;          // KV tokens per tile (64 tensor cores, 32 SIMT)
  int threads = 0;
  int grid_x = 0;            // ceil(max_q_len / block_m)
  int grid_y = 0;            // n_heads
  int grid_z = 0;            // batch
  size_t smem_bytes = 0;     // dynamic shared memory per CTA
};

// "" when implementable, else a message naming the field and the allowed values.
std::string prefill_attention_can_implement(const PrefillAttentionArgs& args);

// block_m: the prefill_attn_block knob (one of core::kPrefillAttnBlocks). allow_tensor_cores = false forces the SIMT variant.
// Returns "" or an error message.
std::string prefill_attention_plan(const PrefillAttentionArgs& args, int block_m, PrefillAttentionPlan* plan,
                                   bool allow_tensor_cores = true);

// Launches only. Returns the launch error, if any.
cudaError_t prefill_attention_run(const PrefillAttentionArgs& args, const PrefillAttentionPlan& plan,
                                  cudaStream_t stream);

}  // namespace soartune::kernels
