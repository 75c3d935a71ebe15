#include "kernels/sampling.cuh"

#include "kernels/launch.cuh"

#include <cfloat>

namespace soartune::kernels {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int vocab, int32_t* out) {
  pdl_wait();
  pdl_launch_dependents();
  const float* row = logits + int64_t(blockIdx.x) * vocab;
  float bv = -FLT_MAX;
  int bi = vocab;  // larger than any id: loses every tie
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    if (v == v && better(v, i, bv, bi)) bv = v, bi = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) sv[warp] = bv, si[warp] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      if (better(sv[w], si[w], bv, bi)) bv = sv[w], bi = si[w];
    out[blockIdx.x] = bi < vocab ? bi : 0;
  }
}

}  // namespace

cudaError_t argmax_run(const float* logits, int rows, int vocab, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return launch(argmax_kernel, rows, kThreads, 0, stream, logits, vocab, out);
}

}  // namespace soartune::kernels
