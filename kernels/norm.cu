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

// One CTA per row. Rows of up to kCached * 4 * kThreads values (4096) stay in registers between the sum of
// squares and the scaling, and the residual, the added branch and gamma are all loaded before the reduction, so a row costs one round trip to memory
// instead of two (a decode step runs 65 of these on rows of 4096).
constexpr int kCached = 4;

__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const RmsNormArgs a) {
  pdl_launch_dependents();  // the next GEMV's CTAs may start their weight loads (launch.cuh)
  pdl_wait();
  __shared__ float shared[kThreads / 32];
  const int i = blockIdx.x;
  const int r = a.row_index ? a.row_index[i] : i;
  float4* res = reinterpret_cast<float4*>(a.residual + int64_t(r) * a.d);
  const float4* add = a.add ? reinterpret_cast<const float4*>(a.add + int64_t(r) * a.d) : nullptr;
  const float4* gamma = reinterpret_cast<const float4*>(a.gamma);
  const int d4 = a.d / 4;
  float4 v[kCached], g[kCached], w[kCached];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kCached; ++k) {
    const int c = threadIdx.x + k * kThreads;
    if (c < d4) {
      v[k] = res[c];
      if (add) w[k] = add[c];
      g[k] = gamma[c];
    }
  }
#pragma unroll
  for (int k = 0; k < kCached; ++k) {
    const int c = threadIdx.x + k * kThreads;
    if (c < d4) {
      if (add) {
        v[k].x += w[k].x, v[k].y += w[k].y, v[k].z += w[k].z, v[k].w += w[k].w;
        res[c] = v[k];
      }
      ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
  }
  for (int c = threadIdx.x + kCached * kThreads; c < d4; c += kThreads) {  // rows past the register cache
    float4 x = res[c];
    if (add) {
      const float4 w = add[c];
      x.x += w.x, x.y += w.y, x.z += w.z, x.w += w.w;
      res[c] = x;
    }
    ss += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
  }
  const float inv = rsqrtf(block_sum(ss, shared) / float(a.d) + a.eps);
  __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(a.out) + int64_t(i) * a.d);
#pragma unroll
  for (int k = 0; k < kCached; ++k) {
    const int c = threadIdx.x + k * kThreads;
    if (c < d4) {
      out[2 * c] = __floats2bfloat162_rn(v[k].x * inv * g[k].x, v[k].y * inv * g[k].y);
      out[2 * c + 1] = __floats2bfloat162_rn(v[k].z * inv * g[k].z, v[k].w * inv * g[k].w);
    }
  }
  for (int c = threadIdx.x + kCached * kThreads; c < d4; c += kThreads) {
    const float4 x = res[c], gg = gamma[c];
    out[2 * c] = __floats2bfloat162_rn(x.x * inv * gg.x, x.y * inv * gg.y);
    out[2 * c + 1] = __floats2bfloat162_rn(x.z * inv * gg.z, x.w * inv * gg.w);
  }
}

__global__ void embedding_kernel(const int32_t* tokens, const __nv_bfloat16* table, float* residual, int d,
                                 float scale) {
  pdl_wait();
  pdl_launch_dependents();
  const int i = blockIdx.x;
  const __nv_bfloat16* row = table + int64_t(tokens[i]) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) residual[int64_t(i) * d + c] = __bfloat162float(row[c]) * scale;
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
                                 cudaStream_t stream, float scale) {
  if (rows == 0) return cudaSuccess;
  return launch(embedding_kernel, rows, 256, 0, stream, tokens, static_cast<const __nv_bfloat16*>(table_bf16), residual, d,
                scale);
}

}  // namespace soartune::kernels
