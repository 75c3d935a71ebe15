// Decode GEMV / skinny GEMM on the tensor cores: y[b][n] = sum_k x[b][k] * W[n][k] for batch 1..32, weights
// in any kernels/weight_format.h format, dequantisation fused (codes -> bf16 in registers, never to memory).
//
// x   [batch][k] bf16, row b at x + b * x_stride (elements)
// y   [batch][n] fp32 (or bf16 when out_bf16), row b at y + b * y_stride; with accumulate (fp32 only)
//     y += x W^T, so an output projection adds itself into the residual stream in its epilogue
// W   DeviceLinear (weight_format.h)
//
// Work: a CTA of `warps` warps owns 16 * m_tiles output rows and splits k among its warps (interleaved 16-byte
// chunks per thread, unrolled `unroll` deep); each warp issues mma.sync m16n8k16 (bf16 in, fp32 accumulate)
// with the weight tile as A and up to four 8-wide batch tiles as B, so every weight byte is read once per call
// for any batch <= 32; the CTA reduces its warps' partials through shared memory.
// Bytes per call: weight_bytes + scale_bytes + batch * k * 2 (x, L2-resident) + batch * n * 4 (y).
// FLOPs per call: 2 * batch * n * k (the tensor cores do ceil(batch / 8) * 8 columns).
//
// Variants (the gemv_variant knob): the closed set core::kGemvVariants (core/kernel_variants.h), declared there
// once with its tile parameters and shape check; gemv.cu instantiates and dispatches that table. Direct
// "m<m_tiles>w<warps>u<unroll>" as above ("...b<n>": registers capped so that n CTAs fit an SM at batch <= 8),
// and pipelined "m1w<warps>s<stages>k<KB>" (sm_90: one CTA an SM loops over row tiles that a producer warp
// streams into shared-memory stages with TMA bulk copies; kernels/README.md). "auto" picks one by the layer's
// shape and the batch (gemv.cu, gemv_plan).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/kernel_variants.h"
#include "kernels/weight_format.h"

namespace soartune::kernels {

using core::kGemvMaxBatch;
using core::kGemvMaxK;

struct GemvArgs {
  DeviceLinear w;
  const void* x = nullptr;   // device bf16
  void* y = nullptr;         // device fp32 (bf16 when out_bf16)
  int batch = 0;             // 1..32
  int64_t x_stride = 0;      // 0 = k
  int64_t y_stride = 0;      // 0 = n
  bool out_bf16 = false;
  bool accumulate = false;   // y += result (fp32 y only)
  // SwiGLU epilogue: W is gate|up with rows interleaved by 8 (rows 16q .. 16q + 7 are gate rows 8q .. 8q + 7,
  // rows 16q + 8 .. 16q + 15 the up rows 8q ..; interleave_gate_up() lays them out), and y is bf16
  // [batch][n / 2] = silu(gate) * up, gate and up rounded to bf16 first (as the unfused path rounds them).
  // Needs out_bf16, no accumulate, n % 16 == 0; y_stride 0 = n / 2.
  bool swiglu = false;
  // Fused RMSNorm (pipelined variants only, batch <= kGemvMaxNormBatch): x is not read; the CTA stages
  // x[b] = bf16(norm_residual[b] / sqrt(mean(norm_residual[b]^2) + norm_eps) * norm_gamma) itself, as
  // rmsnorm_residual_run would write it. norm_residual fp32 [batch][k] (row stride x_stride), norm_gamma fp32 [k].
  const float* norm_residual = nullptr;
  const float* norm_gamma = nullptr;
  float norm_eps = 1e-5f;
};

inline constexpr int kGemvMaxNormBatch = 4;

// Reorders the rows of a fused gate|up weight ([2f][row_bytes], gate rows first) and its per-row scales
// ([2f][scales_per_row], may be empty) into the SwiGLU epilogue's interleaved order, in place. f % 8 == 0.
void interleave_gate_up(uint8_t* rows, size_t row_bytes, float* scales, size_t scales_per_row, int f);

struct GemvPlan {
  int variant = -1;          // index into core::kGemvVariants (and gemv_variant_names())
  int m_tiles = 1, warps = 8, unroll = 2;
  int n_tiles = 1;           // ceil(batch / 8)
  int grid = 0;              // CTAs
  int threads = 0;
  bool pipelined = false;    // the TMA-staged form (it can fuse an RMSNorm, GemvArgs::norm_residual)
};

// The closed set of variant names, in dispatch-table order (core/kernel_variants.h).
using core::gemv_variant_names;

// "" when `variant` ("auto" or a name) can run args (format, k alignment, group, batch, pointers); else a
// message naming the field and the allowed values.
std::string gemv_can_implement(const GemvArgs& args, const std::string& variant);

// Fills *plan (resolving "auto"); returns "" or can_implement's message.
std::string gemv_plan(const GemvArgs& args, const std::string& variant, GemvPlan* plan);

// Launches only. Returns the launch error, if any.
cudaError_t gemv_run(const GemvArgs& args, const GemvPlan& plan, cudaStream_t stream);

}  // namespace soartune::kernels
