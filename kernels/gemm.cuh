// Prefill GEMM: Y[m][n] = X[m][k] * W[n][k]^T for many tokens, through cuBLAS (bf16 in, fp32 accumulate and
// out). Quantised and fp16 weights are first expanded to a bf16 copy of the layer in a scratch buffer
// (dequantize_to_bf16), then multiplied: the expansion moves weight_bytes + 2 n k bytes (0.18-0.21 ms a
// llama3-8b layer on the H200). The engine sends bf16 layers here above 8 rows and the others (which need
// the expansion) above 32; below, the GEMV (gemv.cuh, dequantisation fused) measures faster (docs/perf-log runs 57-60).
//
// X bf16 [m][k] (row stride ldx), Y fp32 [m][n] (row stride ldy), W DeviceLinear (weight_format.h).
// Bytes per call: m k 2 + n k 2 + m n 4 (+ the expansion). FLOPs per call: 2 m n k.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/weight_format.h"

namespace soartune::kernels {

struct GemmContext {
  cublasHandle_t cublas = nullptr;
  void* scratch = nullptr;        // bf16 [n][k] of the largest quantised layer
  size_t scratch_bytes = 0;
};

// Bytes of scratch a layer needs (0 for bf16 weights).
size_t gemm_scratch_bytes(const DeviceLinear& w);

std::string gemm_can_implement(const DeviceLinear& w, int m, const GemmContext& ctx);

// W (any format) -> bf16 [n][k] at out. Launch only.
cudaError_t dequantize_to_bf16_run(const DeviceLinear& w, void* out, cudaStream_t stream);

// Y [m][n] = X [m][k] W^T, fp32 accumulation; Y is fp32, or bf16 when out_bf16 (half the bytes written, and
// half read by the consumer: the prefill qkv and gate|up projections feed RoPE and SwiGLU this way).
// accumulate (fp32 Y only): Y += X W^T (beta = 1), an output projection adding itself into the residual.
// Launches only (cuBLAS on `stream`). Returns "" or an error naming the failing call.
std::string gemm_run(const GemmContext& ctx, const DeviceLinear& w, const void* x, int64_t ldx, void* y,
                     int64_t ldy, int m, cudaStream_t stream, bool out_bf16 = false, bool accumulate = false);

}  // namespace soartune::kernels
