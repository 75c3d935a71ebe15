// Host-side model weights in their canonical form, the one every backend repacks from.
//
// A linear layer computes y[out] = W[out][in] x[in] (+ bias). It is held either as 16-bit values (the
// checkpoint's bf16 or fp16 bits) or, after quantize.h rewrote it, as symmetric integer codes with per-group
// fp32 scales: W[o][i] = q[o][i] * scales[o][i / group_size] (group_size 0: scales[o], one per output row).
// The model code never looks at `bits`: backends call dequantize_rows() (CPU) or repack q/scales (CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/model_config.h"
#include "engine/uninit_vector.h"

namespace soartune::engine {

enum class Dtype16 { kBF16, kFP16 };

struct QuantizedLinear {
  int out = 0, in = 0;
  int bits = 16;                   // 16, 8 or 4
  int group_size = 0;              // bits < 16: input elements per scale; 0 = one scale per output row
  Dtype16 dtype16 = Dtype16::kBF16;
  UninitVector<uint16_t> w16;      // bits == 16: [out][in] bf16/fp16 bits (empty otherwise); sized, then filled
  UninitVector<int8_t> q;          // bits < 16: [out][in] codes in [-2^(bits-1), 2^(bits-1)-1] (RTN and our GPTQ
                                   // use [-(2^(bits-1)-1), ...]; an imported GPTQ checkpoint may hold -2^(bits-1))
  std::vector<float> scales;       // bits < 16: [out][in / group_size] (or [out] when group_size == 0)
  std::vector<float> bias;         // [out] or empty

  int groups_per_row() const { return group_size == 0 ? 1 : in / group_size; }
  // Bytes the stored form takes (4-bit counted packed, two codes a byte, as a device holds it).
  std::size_t storage_bytes() const;
};

// Rows [row0, row0 + rows) of W as fp32, row-major [rows][in], into `dst`.
void dequantize_rows(const QuantizedLinear& w, int row0, int rows, float* dst);

// q/k/v/o widths are the layer's own (ModelConfig::layer_q_dim / layer_kv_dim): a lightning layer of
// MiniCPM-SALA has its own head counts.
struct LayerWeights {
  std::vector<float> attn_norm;    // [hidden] input_layernorm
  QuantizedLinear wq;              // [q_dim][hidden]
  QuantizedLinear wk;              // [kv_dim][hidden]
  QuantizedLinear wv;              // [kv_dim][hidden]
  QuantizedLinear wo;              // [hidden][q_dim]
  // The mixer's sigmoid output gate, o *= sigmoid(w_out_gate x): softmax layers' o_gate
  // (attn_output_gate), lightning layers' z_proj (lightning_output_gate). out == 0 when the model has none.
  QuantizedLinear w_out_gate;      // [q_dim][hidden]
  std::vector<float> q_norm;       // [lightning_head_dim] lightning qk_norm (per head, shared weight), or empty
  std::vector<float> k_norm;       // [lightning_head_dim], or empty
  std::vector<float> o_norm;       // [lightning_q_dim] lightning output RMSNorm over all heads, or empty
  std::vector<float> mlp_norm;     // [hidden] post_attention_layernorm
  QuantizedLinear w_gate;          // [intermediate][hidden]
  QuantizedLinear w_up;            // [intermediate][hidden]
  QuantizedLinear w_down;          // [hidden][intermediate]
};

struct ModelWeights {
  ModelConfig config;
  QuantizedLinear embed;           // [vocab][hidden], always 16-bit (rows gathered, never multiplied)
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;   // [hidden]
  QuantizedLinear lm_head;         // [vocab][hidden], 16-bit unless launch.lm_head_bits; a copy of embed when tied

  std::size_t storage_bytes() const;
};

}  // namespace soartune::engine
