#include "kernels/activation.cuh"

#include <cuda_bf16.h>

#include <cstdint>

namespace soartune::kernels {
namespace {

__global__ void swiglu_kernel(const float* gu, __nv_bfloat16* out, int f, int64_t total) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / f, j = idx % f;
    const float g = gu[i * 2 * f + j], u = gu[i * 2 * f + f + j];
    out[idx] = __float2bfloat16_rn(g / (1.f + expf(-g)) * u);
  }
}

}  // namespace

cudaError_t swiglu_run(const float* gate_up, void* out_bf16, int tokens, int f, cudaStream_t stream) {
  const int64_t total = int64_t(tokens) * f;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (total + threads - 1) / threads;
  swiglu_kernel<<<int(blocks < 65535 * 8 ? blocks : 65535 * 8), threads, 0, stream>>>(
      gate_up, static_cast<__nv_bfloat16*>(out_bf16), f, total);
  return cudaGetLastError();
}

}  // namespace soartune::kernels
