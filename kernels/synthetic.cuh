// Deterministic random fills on the device, for synthetic models too large to generate on the host
// (synthetic:llama3-8b is 16 GB of bf16). Value i depends only on (seed, i): a counter-based hash.
// Bytes per call: the bytes written.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace soartune::kernels {

// bf16 uniform in [-scale, scale].
cudaError_t fill_uniform_bf16(void* dst, int64_t count, uint64_t seed, float scale, cudaStream_t stream);
// fp32 uniform in [lo, hi].
cudaError_t fill_uniform_f32(float* dst, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream);
// int8 codes uniform in [-qmax, qmax]; bits 4 writes the packed kInt4 layout (count codes, count / 2 bytes).
cudaError_t fill_random_codes(void* dst, int64_t count, uint64_t seed, int bits, cudaStream_t stream);

// Random bytes that are finite as fp8 e4m3 and e5m2 (bit 6, the top exponent bit, cleared): |x| < 2.
cudaError_t fill_random_fp8(void* dst, int64_t bytes, uint64_t seed, cudaStream_t stream);

}  // namespace soartune::kernels
