#include "kernels/activation.cuh"

#include "kernels/launch.cuh"

#include <cuda_bf16.h>

#include <cstdint>

namespace soartune::kernels {
namespace {

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + __expf(-g)) * u; }

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) {
  const uint2 r = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float load1(const float* p) { return *p; }
__device__ __forceinline__ float load1(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// Rows over grid.y (strided), four columns per thread: one 16-byte (fp32) or 8-byte (bf16) load of gate and
// of up, one 8-byte store.
template <typename In>
__global__ void swiglu_vec4_kernel(const In* gu, __nv_bfloat16* out, int tokens, int f, bool interleaved8) {
  pdl_wait();
  pdl_launch_dependents();
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (j >= f) return;
  // Four columns never straddle an 8-column block of the interleaved order.
  const int gcol = interleaved8 ? j / 8 * 16 + j % 8 : j, ucol = interleaved8 ? gcol + 8 : f + j;
  for (int i = blockIdx.y; i < tokens; i += gridDim.y) {
    const float4 g = load4(gu + int64_t(i) * 2 * f + gcol);
    const float4 u = load4(gu + int64_t(i) * 2 * f + ucol);
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out + int64_t(i) * f + j);
    o[0] = __floats2bfloat162_rn(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
    o[1] = __floats2bfloat162_rn(silu_mul(g.z, u.z), silu_mul(g.w, u.w));
  }
}

template <typename In>
__global__ void swiglu_kernel(const In* gu, __nv_bfloat16* out, int f, int64_t total) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / f, j = idx % f;
    out[idx] = __float2bfloat16_rn(silu_mul(load1(gu + i * 2 * f + j), load1(gu + i * 2 * f + f + j)));
  }
}

template <typename In>
cudaError_t swiglu_launch(const In* gu, __nv_bfloat16* out, int tokens, int f, cudaStream_t stream,
                          bool interleaved8) {
  const int64_t total = int64_t(tokens) * f;
  const int threads = 256;
  if (interleaved8 && f % 8 != 0) return cudaErrorInvalidValue;
  if (f % 4 == 0) {
    const dim3 grid((f / 4 + threads - 1) / threads, tokens < 65535 ? tokens : 65535);
    return launch(swiglu_vec4_kernel<In>, grid, threads, 0, stream, gu, out, tokens, f, interleaved8);
  }
  const int64_t blocks = (total + threads - 1) / threads;
  return launch(swiglu_kernel<In>, int(blocks < 65535 * 8 ? blocks : 65535 * 8), threads, 0, stream, gu, out, f,
                total);
}

}  // namespace

cudaError_t swiglu_run(const void* gate_up, void* out_bf16, int tokens, int f, cudaStream_t stream,
                       bool gate_up_bf16, bool interleaved8) {
  if (int64_t(tokens) * f == 0) return cudaSuccess;
  auto* out = static_cast<__nv_bfloat16*>(out_bf16);
  if (gate_up_bf16)
    return swiglu_launch(static_cast<const __nv_bfloat16*>(gate_up), out, tokens, f, stream, interleaved8);
  return swiglu_launch(static_cast<const float*>(gate_up), out, tokens, f, stream, interleaved8);
}

}  // namespace soartune::kernels
