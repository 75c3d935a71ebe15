// CPU twins of the small fused ops (norm.cuh, rope.cuh, activation.cuh, sampling.cuh), fp32 with fp64 sums.
#pragma once

#include <cstdint>

namespace soartune::kernels {

// residual [rows][d] += add (optional, same shape); out[i] = residual[i] * rsqrt(mean sq + eps) * gamma (fp32 out).
void rmsnorm_residual_ref(float* residual, const float* add, const float* gamma, int rows, int d, float eps,
                          float* out);

// Rotates q heads then k heads of one token's qkv row (q | k | v, bias already added) at `pos` in place;
// rotate false (NoPE) leaves the row as it is, as rope_kv_write_run does with RopeKvArgs::rotate false.
void rope_ref(float* qkv_row, int n_heads, int n_kv_heads, int head_dim, int pos, float theta, bool rotate = true);

// out[i][j] = silu(gu[i][j]) * gu[i][f + j].
void swiglu_ref(const float* gate_up, int tokens, int f, float* out);

// Lowest index of the largest non-NaN value of each row.
void argmax_ref(const float* logits, int rows, int vocab, int32_t* out);

}  // namespace soartune::kernels
