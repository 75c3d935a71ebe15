#include "kernels/attention_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/numeric_formats.h"

namespace soartune::kernels {

float kv_cache_value(const void* cache, KvCacheDtype dtype, int64_t index, float scale) {
  switch (dtype) {
    case KvCacheDtype::kBf16: return bf16_to_f32(static_cast<const uint16_t*>(cache)[index]);
    case KvCacheDtype::kFp16: return fp16_to_f32(static_cast<const uint16_t*>(cache)[index]);
    case KvCacheDtype::kFp8E4M3: return fp8_e4m3_to_f32(static_cast<const uint8_t*>(cache)[index]) * scale;
    case KvCacheDtype::kFp8E5M2: return fp8_e5m2_to_f32(static_cast<const uint8_t*>(cache)[index]) * scale;
  }
  return NAN;
}

namespace {

// Attention of one query row q[head_dim] (query head h) over tokens 0..n_tokens-1 of one sequence.
void attend_row(const float* q, const PagedKvView& kv, const int32_t* pages, int kv_head, int n_tokens,
                float scale, float* out) {
  const PagedKvLayout& L = kv.layout;
  const int d_n = L.head_dim;
  if (n_tokens <= 0) {
    for (int d = 0; d < d_n; ++d) out[d] = 0.f;
    return;
  }
  std::vector<float> s(n_tokens);
  float m = -INFINITY;
  for (int t = 0; t < n_tokens; ++t) {
    const int64_t base = L.offset(pages[t / L.page_size], kv_head, t % L.page_size, 0);
    float dot = 0.f;
    for (int d = 0; d < d_n; ++d) dot += q[d] * kv_cache_value(kv.k, L.dtype, base + d, kv.k_scale);
    s[t] = dot * scale;
    m = std::fmax(m, s[t]);
  }
  std::vector<double> acc(d_n, 0.0);
  double l = 0.0;
  for (int t = 0; t < n_tokens; ++t) {
    const double p = std::exp(double(s[t]) - double(m));
    l += p;
    const int64_t base = L.offset(pages[t / L.page_size], kv_head, t % L.page_size, 0);
    for (int d = 0; d < d_n; ++d) acc[d] += p * kv_cache_value(kv.v, L.dtype, base + d, kv.v_scale);
  }
  for (int d = 0; d < d_n; ++d) out[d] = static_cast<float>(acc[d] / l);
}

}  // namespace

void decode_attention_ref(const float* q, const PagedKvView& kv, const int32_t* block_table,
                          int block_table_stride, const int32_t* seq_lens, int batch, int n_heads,
                          float softmax_scale, float* out) {
  const int d_n = kv.layout.head_dim;
  const int group = n_heads / kv.layout.n_kv_heads;
  const float scale = softmax_scale != 0.f ? softmax_scale : 1.f / std::sqrt(float(d_n));
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < n_heads; ++h) {
      const int64_t row = (int64_t(b) * n_heads + h) * d_n;
      attend_row(q + row, kv, block_table + int64_t(b) * block_table_stride, h / group, seq_lens[b], scale,
                 out + row);
    }
  }
}

void prefill_attention_ref(const float* q, const PagedKvView& kv, const int32_t* block_table,
                           int block_table_stride, const int32_t* q_offsets, const int32_t* prefix_lens,
                           int batch, int n_heads, float softmax_scale, float* out) {
  const int d_n = kv.layout.head_dim;
  const int group = n_heads / kv.layout.n_kv_heads;
  const float scale = softmax_scale != 0.f ? softmax_scale : 1.f / std::sqrt(float(d_n));
  for (int b = 0; b < batch; ++b) {
    for (int i = q_offsets[b]; i < q_offsets[b + 1]; ++i) {
      const int pos = prefix_lens[b] + (i - q_offsets[b]);
      for (int h = 0; h < n_heads; ++h) {
        const int64_t row = (int64_t(i) * n_heads + h) * d_n;
        attend_row(q + row, kv, block_table + int64_t(b) * block_table_stride, h / group, pos + 1, scale,
                   out + row);
      }
    }
  }
}

}  // namespace soartune::kernels
