#include "kernels/gemm.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace soartune::kernels {
namespace {

// One thread per 16-byte chunk of codes; writes the chunk's values as bf16.
template <WeightFormat F>
__global__ void dequant_kernel(const uint8_t* w, const float* scales, __nv_bfloat16* out, int n, int k, int group) {
  constexpr int V = F == WeightFormat::kInt4 ? 32 : F == WeightFormat::kInt8 ? 16 : 8;
  const int chunks_per_row = k / V;
  const int64_t total = int64_t(n) * chunks_per_row;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / chunks_per_row;
    const int c = int(idx % chunks_per_row);
    const uint4 raw = reinterpret_cast<const uint4*>(w)[idx];
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    __nv_bfloat16* o = out + row * k + int64_t(c) * V;
    if constexpr (F == WeightFormat::kFp16) {
      const __half* h = reinterpret_cast<const __half*>(words);
#pragma unroll
      for (int i = 0; i < 8; ++i) o[i] = __float2bfloat16_rn(__half2float(h[i]));
    } else if constexpr (F == WeightFormat::kInt8) {
      const float s = scales[row * (k / group) + (c * V) / group];
      const int8_t* q = reinterpret_cast<const int8_t*>(words);
#pragma unroll
      for (int i = 0; i < 16; ++i) o[i] = __float2bfloat16_rn(float(q[i]) * s);
    } else if constexpr (F == WeightFormat::kInt4) {
      const float s = scales[row * (k / group) + (c * V) / group];
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int lo = int((words[j] >> (4 * i)) & 0xFu) - 8;
          const int hi = int((words[j] >> (16 + 4 * i)) & 0xFu) - 8;
          o[8 * j + 2 * i] = __float2bfloat16_rn(float(lo) * s);
          o[8 * j + 2 * i + 1] = __float2bfloat16_rn(float(hi) * s);
        }
    }
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
  const int v = w.format == WeightFormat::kInt4 ? 32 : w.format == WeightFormat::kInt8 ? 16 : 8;
  const int64_t total = int64_t(w.n) * (w.k / v);
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
