#include "kernels/synthetic.cuh"

#include <cuda_bf16.h>

namespace soartune::kernels {
namespace {

__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ float unit(uint64_t seed, int64_t i) {  // [0, 1)
  return float(mix(seed * 0x100000001b3ull + uint64_t(i)) >> 40) * (1.0f / 16777216.0f);
}

__global__ void bf16_kernel(__nv_bfloat16* d, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = __float2bfloat16_rn((2.f * unit(seed, i) - 1.f) * scale);
}

__global__ void f32_kernel(float* d, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = lo + (hi - lo) * unit(seed, i);
}

// One byte per thread: one int8 code, or two 4-bit codes (stored q + 8, never 0 = -8).
__global__ void codes_kernel(uint8_t* d, int64_t bytes, uint64_t seed, int bits) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < bytes;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix(seed * 0x100000001b3ull + uint64_t(i));
    if (bits == 8) {
      d[i] = uint8_t(int8_t(int(r % 255) - 127));
    } else {
      d[i] = uint8_t((1 + r % 15) | ((1 + (r >> 8) % 15) << 4));
    }
  }
}

__global__ void fp8_kernel(uint8_t* d, int64_t bytes, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < bytes;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = uint8_t(mix(seed * 0x100000001b3ull + uint64_t(i)) & 0xBFu);
}

int blocks_for(int64_t n) { return int(n / 256 + 1 < 132 * 32 ? n / 256 + 1 : 132 * 32); }

}  // namespace

cudaError_t fill_uniform_bf16(void* dst, int64_t count, uint64_t seed, float scale, cudaStream_t stream) {
  bf16_kernel<<<blocks_for(count), 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), count, seed, scale);
  return cudaGetLastError();
}

cudaError_t fill_uniform_f32(float* dst, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  f32_kernel<<<blocks_for(count), 256, 0, stream>>>(dst, count, seed, lo, hi);
  return cudaGetLastError();
}

cudaError_t fill_random_codes(void* dst, int64_t count, uint64_t seed, int bits, cudaStream_t stream) {
  const int64_t bytes = bits == 8 ? count : count / 2;
  codes_kernel<<<blocks_for(bytes), 256, 0, stream>>>(static_cast<uint8_t*>(dst), bytes, seed, bits);
  return cudaGetLastError();
}

cudaError_t fill_random_fp8(void* dst, int64_t bytes, uint64_t seed, cudaStream_t stream) {
  fp8_kernel<<<blocks_for(bytes), 256, 0, stream>>>(static_cast<uint8_t*>(dst), bytes, seed);
  return cudaGetLastError();
}

}  // namespace soartune::kernels
