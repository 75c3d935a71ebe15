#include "kernels/gemm.cuh"

#include "kernels/mma_bf16.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace soartune::kernels {
namespace {

// One thread per 8 consecutive values of a row (16 bytes of bf16 out): int4 one 32-bit word of codes (word j
// of a 16-byte block holds its values 8j .. 8j + 7, weight_format.h), int8 8 bytes, fp16 16 bytes, so a
// warp reads and writes contiguous bytes. Each value is value * scale rounded to bf16 once. (Element by element,
// 2-byte stores 64 bytes apart across a warp, the expansion took 2.2-2.4 ms a llama3-8b layer, 20x its bytes
// at the copy rate: docs/perf-log run 57.)
template <WeightFormat F>
__global__ void __launch_bounds__(256) dequant_kernel(const uint8_t* w, const float* scales, __nv_bfloat16* out,
                                                       int n, int k, int group) {
  const int per_row = k / 8;
  const int64_t total = int64_t(n) * per_row;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / per_row;
    const int col = int(e - row * per_row) * 8;
    uint32_t p[4];  // bf16 pairs: values 2i, 2i + 1 of the eight
    if constexpr (F == WeightFormat::kFp16) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w) + e);
      const uint32_t h[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[i]));
        p[i] = pack_bf16x2(f.x, f.y);
      }
    } else if constexpr (F == WeightFormat::kInt8) {
      const uint2 raw = __ldg(reinterpret_cast<const uint2*>(w) + e);
      const float s = __ldg(scales + row * (k / group) + col / group);
      int8_word_bf16(raw.x, s, p);
      int8_word_bf16(raw.y, s, p + 2);
    } else if constexpr (F == WeightFormat::kInt4) {
      const uint32_t word = __ldg(reinterpret_cast<const uint32_t*>(w) + e);
      const float s = __ldg(scales + row * (k / group) + col / group);
      int4_word_bf16(word, s, p);
    }
    reinterpret_cast<uint4*>(out)[e] = make_uint4(p[0], p[1], p[2], p[3]);
  }
}

const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(other)";
  }
}

}  // namespace

size_t gemm_scratch_bytes(const DeviceLinear& w) {
  return w.format == WeightFormat::kBf16 ? 0 : size_t(w.n) * w.k * 2;
}

std::string gemm_can_implement(const DeviceLinear& w, int m, const GemmContext& ctx) {
  if (m < 1) return "m: must be >= 1";
  if (!ctx.cublas) return "gemm: no cuBLAS handle";
  const int v = w.format == WeightFormat::kInt4 ? 32 : w.format == WeightFormat::kInt8 ? 16 : 8;
  if (w.k % v != 0) return "k: " + std::to_string(w.k) + " is not a multiple of " + std::to_string(v);
  if (gemm_scratch_bytes(w) > ctx.scratch_bytes) return "gemm: scratch too small for the dequantised layer";
  return "";
}

cudaError_t dequantize_to_bf16_run(const DeviceLinear& w, void* out, cudaStream_t stream) {
  const int threads = 256;
  const int64_t total = int64_t(w.n) * (w.k / 8);  // a thread per 8 values
  const int blocks = int(total / threads + 1 < 132 * 16 ? total / threads + 1 : 132 * 16);
  auto* o = static_cast<__nv_bfloat16*>(out);
  auto* src = static_cast<const uint8_t*>(w.w);
  switch (w.format) {
    case WeightFormat::kBf16:
      return cudaMemcpyAsync(out, w.w, size_t(w.n) * w.k * 2, cudaMemcpyDeviceToDevice, stream);
    case WeightFormat::kFp16:
      dequant_kernel<WeightFormat::kFp16><<<blocks, threads, 0, stream>>>(src, w.scales, o, w.n, w.k, w.group);
      break;
    case WeightFormat::kInt8:
      dequant_kernel<WeightFormat::kInt8><<<blocks, threads, 0, stream>>>(src, w.scales, o, w.n, w.k, w.group);
      break;
    case WeightFormat::kInt4:
      dequant_kernel<WeightFormat::kInt4><<<blocks, threads, 0, stream>>>(src, w.scales, o, w.n, w.k, w.group);
      break;
  }
  return cudaGetLastError();
}

std::string gemm_run(const GemmContext& ctx, const DeviceLinear& w, const void* x, int64_t ldx, void* y,
                     int64_t ldy, int m, cudaStream_t stream, bool out_bf16, bool accumulate) {
  if (accumulate && out_bf16) return "accumulate: only into an fp32 y (out_bf16 is set)";
  const void* wb = w.w;
  if (w.format != WeightFormat::kBf16) {
    const cudaError_t e = dequantize_to_bf16_run(w, ctx.scratch, stream);
    if (e != cudaSuccess) return std::string("dequantize_to_bf16_run: ") + cudaGetErrorString(e);
    wb = ctx.scratch;
  }
  cublasStatus_t s = cublasSetStream(ctx.cublas, stream);
  if (s != CUBLAS_STATUS_SUCCESS) return std::string("cublasSetStream: ") + cublas_name(s);
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  // Column-major view: Y^T [n][m] = W^T(op T of the [k][n] column-major W) * X^T [k][m].
  s = cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, w.n, m, w.k, &alpha, wb, CUDA_R_16BF, w.k, x, CUDA_R_16BF,
                   int(ldx ? ldx : w.k), &beta, y, out_bf16 ? CUDA_R_16BF : CUDA_R_32F, int(ldy ? ldy : w.n), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    return std::string("cublasGemmEx(n=") + std::to_string(w.n) + ", m=" + std::to_string(m) +
           ", k=" + std::to_string(w.k) + "): " + cublas_name(s);
  return "";
}

}  // namespace soartune::kernels
