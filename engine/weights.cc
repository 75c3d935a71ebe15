#include "engine/weights.h"

#include "kernels/numeric_formats.h"

namespace soartune::engine {

std::size_t QuantizedLinear::storage_bytes() const {
  std::size_t b = 0;
  if (bits == 16) b = w16.size() * 2;
  else if (bits == 8) b = q.size();
  else b = (q.size() + 1) / 2;
  return b + scales.size() * sizeof(float) + bias.size() * sizeof(float);
}

void dequantize_rows(const QuantizedLinear& w, int row0, int rows, float* dst) {
  const std::size_t in = static_cast<std::size_t>(w.in);
  if (w.bits == 16) {
    const uint16_t* src = w.w16.data() + static_cast<std::size_t>(row0) * in;
    const std::size_t n = static_cast<std::size_t>(rows) * in;
    if (w.dtype16 == Dtype16::kBF16)
      for (std::size_t i = 0; i < n; ++i) dst[i] = kernels::bf16_to_f32(src[i]);
    else
      for (std::size_t i = 0; i < n; ++i) dst[i] = kernels::fp16_to_f32(src[i]);
    return;
  }
  const int gpr = w.groups_per_row();
  const std::size_t gsize = w.group_size == 0 ? in : static_cast<std::size_t>(w.group_size);
  for (int r = 0; r < rows; ++r) {
    const std::size_t row = static_cast<std::size_t>(row0 + r);
    const int8_t* q = w.q.data() + row * in;
    const float* s = w.scales.data() + row * gpr;
    float* d = dst + static_cast<std::size_t>(r) * in;
    for (std::size_t i = 0; i < in; ++i) d[i] = static_cast<float>(q[i]) * s[i / gsize];
  }
}

std::size_t ModelWeights::storage_bytes() const {
  std::size_t b = embed.storage_bytes() + final_norm.size() * 4;
  if (!config.tie_embeddings || lm_head.bits != 16) b += lm_head.storage_bytes();  // a quantised copy is its own
  for (const auto& l : layers)
    b += (l.attn_norm.size() + l.mlp_norm.size() + l.q_norm.size() + l.k_norm.size() + l.o_norm.size()) * 4 +
         l.wq.storage_bytes() + l.wk.storage_bytes() + l.wv.storage_bytes() + l.wo.storage_bytes() +
         l.w_out_gate.storage_bytes() + l.w_gate.storage_bytes() + l.w_up.storage_bytes() + l.w_down.storage_bytes();
  return b;
}

}  // namespace soartune::engine
