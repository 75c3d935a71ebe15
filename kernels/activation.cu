#include "kernels/activation.cuh"

#include "kernels/launch.cuh"

#include <cuda_bf16.h>

#include <cstdint>

namespace soartune::kernels {
namespace {

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + __expf(-g)) * u; }

// Rows over grid.y (strided), four columns per thread: one 16-byte load of gate and of up, one 8-byte store.
__global__ void swiglu_vec4_kernel(const float* gu, __nv_bfloat16* out, int tokens, int f) {
  pdl_wait();
  pdl_launch_dependents();
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (j >= f) return;
  for (int i = blockIdx.y; i < tokens; i += gridDim.y) {
    const float4 g = *reinterpret_cast<const float4*>(gu + int64_t(i) * 2 * f + j);
    const float4 u = *reinterpret_cast<const float4*>(gu + int64_t(i) * 2 * f + f + j);
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out + int64_t(i) * f + j);
    o[0] = __floats2bfloat162_rn(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
    o[1] = __floats2bfloat162_rn(silu_mul(g.z, u.z), silu_mul(g.w, u.w));
  }
}

__global__ void swiglu_kernel(const float* gu, __nv_bfloat16* out, int f, int64_t total) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / f, j = idx % f;
    out[idx] = __float2bfloat16_rn(silu_mul(gu[i * 2 * f + j], gu[i * 2 * f + f + j]));
  }
}

}  // namespace

cudaError_t swiglu_run(const float* gate_up, void* out_bf16, int tokens, int f, cudaStream_t stream) {
  const int64_t total = int64_t(tokens) * f;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  if (f % 4 == 0) {
    const dim3 grid((f / 4 + threads - 1) / threads, tokens < 65535 ? tokens : 65535);
    return launch(swiglu_vec4_kernel, grid, threads, 0, stream, gate_up, static_cast<__nv_bfloat16*>(out_bf16), tokens, f);
  }
  const int64_t blocks = (total + threads - 1) / threads;
  return launch(swiglu_kernel, int(blocks < 65535 * 8 ? blocks : 65535 * 8), threads, 0, stream, gate_up,
                static_cast<__nv_bfloat16*>(out_bf16), f, total);
}

}  // namespace soartune::kernels
