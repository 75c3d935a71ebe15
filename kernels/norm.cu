#include "kernels/norm.cuh"

#include "kernels/launch.cuh"

#include <cuda_bf16.h>

namespace soartune::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float block_sum(float v, float* shared) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) s += shared[w];
  __syncthreads();
  return s;
}

__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const RmsNormArgs a) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float shared[kThreads / 32];
  const int i = blockIdx.x;
  const int r = a.row_index ? a.row_index[i] : i;
  float4* res = reinterpret_cast<float4*>(a.residual + int64_t(r) * a.d);
  const float4* add = a.add ? reinterpret_cast<const float4*>(a.add + int64_t(r) * a.d) : nullptr;
  const int d4 = a.d / 4;
  float ss = 0.f;
  for (int c = threadIdx.x; c < d4; c += kThreads) {
    float4 v = res[c];
    if (add) {
      const float4 w = add[c];
      v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
      res[c] = v;
    }
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  const float inv = rsqrtf(block_sum(ss, shared) / float(a.d) + a.eps);
  const float4* gamma = reinterpret_cast<const float4*>(a.gamma);
  __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(a.out) + int64_t(i) * a.d);
  for (int c = threadIdx.x; c < d4; c += kThreads) {
    const float4 v = res[c], g = gamma[c];
    out[2 * c] = __floats2bfloat162_rn(v.x * inv * g.x, v.y * inv * g.y);
    out[2 * c + 1] = __floats2bfloat162_rn(v.z * inv * g.z, v.w * inv * g.w);
  }
}

__global__ void embedding_kernel(const int32_t* tokens, const __nv_bfloat16* table, float* residual, int d) {
  pdl_wait();
  pdl_launch_dependents();
  const int i = blockIdx.x;
  const __nv_bfloat16* row = table + int64_t(tokens[i]) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) residual[int64_t(i) * d + c] = __bfloat162float(row[c]);
}

}  // namespace

std::string rmsnorm_can_implement(const RmsNormArgs& a) {
  if (a.d <= 0 || a.d % 4 != 0) return "d: " + std::to_string(a.d) + " is not a positive multiple of 4";
  if (a.rows < 0) return "rows: must be >= 0";
  if (!a.residual || !a.gamma || !a.out) return "pointers: residual, gamma and out are required";
  return "";
}

cudaError_t rmsnorm_residual_run(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return launch(rmsnorm_kernel, a.rows, kThreads, 0, stream, a);
}

cudaError_t embedding_gather_run(const int32_t* tokens, const void* table_bf16, float* residual, int rows, int d,
                                 cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return launch(embedding_kernel, rows, 256, 0, stream, tokens, static_cast<const __nv_bfloat16*>(table_bf16), residual, d);
}

}  // namespace soartune::kernels
