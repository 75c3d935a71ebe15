// Fused residual add + RMSNorm, and the embedding gather that starts the residual stream.
//
// rmsnorm_residual: for each of `rows` rows (rows[i] of `residual` when row_index is given, else row i):
//   residual[r] += add[r]            (when add != nullptr; fp32, same rows as residual)
//   out[i] = bf16(residual[r] / sqrt(mean(residual[r]^2) + eps) * gamma)
// residual fp32 [*][d], gamma fp32 [d], out bf16 [rows][d]. d % 4 == 0.
// Bytes per call: rows * d * (4 read + 4 written when add + 4 add + 2 out) + d * 4. FLOPs: ~4 * rows * d.
//
// embedding_gather: residual[i][:] = fp32(table[tokens[i]][:]) * scale; table bf16 [vocab][d]. (scale: the muP
// embedding scale of MiniCPM models, applied in fp32 as the reference applies it; 1 for Llama.)
// Bytes per call: rows * d * (2 + 4).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace soartune::kernels {

struct RmsNormArgs {
  float* residual = nullptr;
  const float* add = nullptr;          // optional
  const int32_t* row_index = nullptr;  // optional, device [rows]
  const float* gamma = nullptr;
  void* out = nullptr;                 // bf16
  int rows = 0;
  int d = 0;
  float eps = 1e-5f;
};

std::string rmsnorm_can_implement(const RmsNormArgs& args);
cudaError_t rmsnorm_residual_run(const RmsNormArgs& args, cudaStream_t stream);

cudaError_t embedding_gather_run(const int32_t* tokens, const void* table_bf16, float* residual, int rows,
                                 int d, cudaStream_t stream, float scale = 1.f);

}  // namespace soartune::kernels
