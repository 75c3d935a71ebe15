// CPU twins of kernels/lightning.cuh (MiniCPM-SALA's lightning attention and the fused ops around it), plain
// C++, fp32 values with fp64 sums. Inputs are the values the GPU reads (bf16 tensors given as their exact fp32
// values); outputs are fp32, before the GPU's final bf16 rounding, so a test compares with bf16 tolerance.
#pragma once

#include <cstdint>

namespace soartune::kernels {

// lightning_qk_run's math, in place on qkv fp32 [tokens][row_stride] (q heads, then k heads, then v):
// per q head and k head, x = rmsnorm(x) * gamma over head_dim (skipped when gamma is null), then the
// half-split RoPE at positions[t] (angle pos * theta^(-2j / head_dim), skipped when !rope). v is untouched.
void lightning_qk_ref(float* qkv, int64_t row_stride, const float* q_norm, const float* k_norm,
                      const int32_t* positions, bool rope, float rope_theta, float eps, int tokens, int heads,
                      int kv_heads, int head_dim);

struct LightningRefArgs {
  const float* qkv = nullptr;          // [T][row_stride]: q (heads * d) | k (kv_heads * d) | v (kv_heads * d)
  int64_t row_stride = 0;
  float* out = nullptr;                // [T][heads * d]
  float* state = nullptr;              // [slots][heads][d][d], fp32 (a bf16 state holds bf16 values)
  bool bf16_state = false;             // round the state to bf16 after every recurrence step and every chunk
  const int32_t* q_offsets = nullptr;  // [batch + 1]
  const int32_t* start_pos = nullptr;  // [batch]: 0 resets the slot's state first
  const int32_t* seq_slots = nullptr;  // [batch]
  const float* log_decay = nullptr;    // [heads]
  float scale = 1.f;
  int batch = 0, chunk = 64;
  int heads = 0, kv_heads = 0, head_dim = 0;
};

// lightning_run's math: a one-token sequence takes the recurrence S = exp(g) S + k^T v, o = scale q S; a
// longer one the chunked form (chunks of `chunk` tokens from the step's first token of the sequence), with the
// state rounded to bf16 at the same points as engine/lightning_attention.cc when bf16_state.
void lightning_ref(const LightningRefArgs& args);

// output_gate_run's math: out[i] = norm(attn[i]) * (gate ? sigmoid(gate[i]) : 1) over rows of `width`,
// norm(x) = x / sqrt(mean(x^2) + eps) * gamma (skipped when gamma is null). gate row i at gate + i * gate_stride.
void output_gate_ref(const float* attn, const float* gate, int64_t gate_stride, const float* gamma, int tokens,
                     int width, float eps, float* out);

}  // namespace soartune::kernels
