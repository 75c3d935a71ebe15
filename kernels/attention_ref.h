// CPU twins of the attention kernels: plain fp32 arithmetic (fp64 softmax sums) over the same paged
// layout (kernels/attention_paged.h). Used by the kernel tests; usable by a CPU engine.
#pragma once

#include <cstdint>

#include "kernels/attention_paged.h"

namespace soartune::kernels {

// One layer's K and V caches as raw bytes in host memory.
struct PagedKvView {
  const void* k = nullptr;
  const void* v = nullptr;
  PagedKvLayout layout;
  float k_scale = 1.f;
  float v_scale = 1.f;
};

// The real value of one stored element (bf16 / fp16 widened, fp8 decoded, times scale), through
// kernels/numeric_formats.h.
float kv_cache_value(const void* cache, KvCacheDtype dtype, int64_t index, float scale);

// q [batch][n_heads][head_dim] fp32 -> out same shape fp32. seq_lens[b] = 0 gives zeros.
// softmax_scale 0 = 1 / sqrt(head_dim).
void decode_attention_ref(const float* q, const PagedKvView& kv, const int32_t* block_table,
                          int block_table_stride, const int32_t* seq_lens, int batch, int n_heads,
                          float softmax_scale, float* out);

// q [total_q][n_heads][head_dim] fp32, sequence b owning tokens q_offsets[b] .. q_offsets[b+1]-1 at
// positions prefix_lens[b] + j (causal) -> out same shape fp32.
void prefill_attention_ref(const float* q, const PagedKvView& kv, const int32_t* block_table,
                           int block_table_stride, const int32_t* q_offsets, const int32_t* prefix_lens,
                           int batch, int n_heads, float softmax_scale, float* out);

}  // namespace soartune::kernels
