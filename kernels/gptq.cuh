// The GPU side of GPTQ (engine/cuda/gptq_cuda.cc drives these with cuBLAS / cuSOLVER; the CPU twin is
// engine/gptq_quantize.cc). Layouts: the Hessian and its factors n x n column-major fp64; a linear's weights
// during the sweep W column-major fp64 [in columns][out rows] (w[o + j * out]), so one column is contiguous;
// codes row-major int8 [out][in] and scales row-major fp32 [out][groups], as QuantizedLinear holds them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace soartune::kernels {

// h64 = the full symmetric matrix whose lower triangle is h32's (as cublasSsyrk leaves it).
// Bytes per call: n^2 * (4 + 8).
cudaError_t gptq_hessian_to_f64(const float* h32, double* h64, int n, cudaStream_t stream);

// Inputs that never fire (H[i][i] == 0): H[i][i] = 1 and dead[i] = 1 (their weights are zeroed); then
// H += damp_pct / 100 * mean(diag H) * I. One CTA; bytes ~ n * 17.
cudaError_t gptq_dead_and_damp(double* h, uint8_t* dead, int n, double damp_pct, cudaStream_t stream);

// w[o + j * out] = fp64(w16[o][j]) (bf16 bits when bf16, else fp16), 0 where dead[j]. A tiled transpose;
// bytes per call: out * in * (2 + 8).
cudaError_t gptq_weights_f64(const uint16_t* w16, bool bf16, const uint8_t* dead, double* w, int out, int in,
                             cudaStream_t stream);

// amax[o][g] = max |w[o][g * gsize .. (g + 1) * gsize)| as fp32 (the input of quant_scale).
cudaError_t gptq_group_amax(const double* w, float* amax, int out, int in, int gsize, cudaStream_t stream);

// One block of `count` (<= kGptqBlock) columns starting at j1, each row independent: per column j, the code
// q = clamp(rint(fp32(w) / scale), -qmax, qmax) into codes[o][j], the error e = (w - q * scale) / U[j][j]
// into err[o + i * out] (column-major [count][out]), and w[o][k] -= e * U[j][k] for the block's later columns
// k. U is the upper Cholesky factor of the damped inverse Hessian, read as its transpose: the lower factor
// l (column-major), U[j][k] = l[k + j * n]. The columns after the block are the caller's (one GEMM).
// FLOPs per call: out * count^2 (fp64).
constexpr int kGptqBlock = 128;
struct GptqBlockArgs {
  double* w = nullptr;
  const double* l = nullptr;
  const float* scales = nullptr;
  int8_t* codes = nullptr;
  double* err = nullptr;
  int out = 0, n = 0, j1 = 0, count = 0, gsize = 0, groups = 0, qmax = 0;
};
cudaError_t gptq_block_run(const GptqBlockArgs& args, cudaStream_t stream);

}  // namespace soartune::kernels
