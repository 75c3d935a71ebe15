// Device helpers shared by the attention kernels: 16-byte KV loads (plain and cp.async) with the
// dequantisation fused, and activation loads/stores. Internal to attention_decode.cu and attention_prefill.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention_paged.h"

namespace soartune::kernels::attn_detail {

constexpr float kLog2e = 1.4426950408889634f;

// Bytes of one stored element, and elements in one 16-byte vector (usable in device code).
template <KvCacheDtype T>
inline constexpr int kKvBytes = (T == KvCacheDtype::kBf16 || T == KvCacheDtype::kFp16) ? 2 : 1;
template <KvCacheDtype T>
inline constexpr int kKvVec = 16 / kKvBytes<T>;

__device__ __forceinline__ void fp8x2_to_float2(uint32_t two_bytes, __nv_fp8_interpretation_t kind, float* f) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes), kind);
  const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&h));
  f[0] = v.x;
  f[1] = v.y;
}

// Widens one 16-byte vector of the cache into kv_vec<T>() floats (element 0 = lowest address);
// fp8 values are multiplied by scale (16-bit values are stored unscaled).
template <KvCacheDtype T>
__device__ __forceinline__ void dequant16(const uint4& raw, float scale, float* f) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (T == KvCacheDtype::kBf16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else if constexpr (T == KvCacheDtype::kFp16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  } else {
    constexpr __nv_fp8_interpretation_t kind = T == KvCacheDtype::kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      fp8x2_to_float2(w[i] & 0xffffu, kind, f + 4 * i);
      fp8x2_to_float2(w[i] >> 16, kind, f + 4 * i + 2);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) f[i] *= scale;
  }
}

// 2^x by the hardware approximation (ex2.approx.ftz: about 2 ulp, -inf -> 0), for the softmax inner loops;
// exp2f without fast-math adds range handling to every call.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// t / page_size and t % page_size without an integer division when page_size is a power of two (the usual
// case); any other size divides. Built once per CTA.
struct PageDiv {
  int size, shift;  // shift < 0: not a power of two
  __device__ __forceinline__ explicit PageDiv(int page_size) : size(page_size), shift(-1) {
    if ((page_size & (page_size - 1)) == 0)
      for (shift = 0; (1 << shift) < page_size; ++shift) {}
  }
  __device__ __forceinline__ int page(int t) const { return shift >= 0 ? t >> shift : t / size; }
  __device__ __forceinline__ int slot(int t) const { return shift >= 0 ? t & (size - 1) : t % size; }
};

__device__ __forceinline__ uint4 load16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

// 16-byte global -> shared copy that bypasses registers; src_bytes 0 writes 16 zero bytes (src unread).
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Two floats rounded into one register of two 16-bit MMA elements (T = __nv_bfloat16 or __half), lo first.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// D += A B for one m16n8k16 tile, fp32 accumulators (A row-major fragments, B column-major).
template <typename T>
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two fp8 bytes (the low 16 bits of two_bytes, first element lowest) widened exactly to two fp16 in one
// register, as an MMA operand wants them.
template <KvCacheDtype T>
__device__ __forceinline__ uint32_t fp8x2_to_half2_bits(uint32_t two_bytes) {
  constexpr __nv_fp8_interpretation_t kind = T == KvCacheDtype::kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), kind);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// Whether the code the driver runs for `kernel` was built for sm_80 or later (mma.sync m16n8k16 exists); a
// build for an older target leaves only a trap in the tensor-core kernels. False when no device answers.
template <typename Kernel>
inline bool built_for_sm80(Kernel* kernel) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.binaryVersion >= 80;
}

__device__ __forceinline__ float load_act(const void* base, ActDtype t, int64_t i) {
  switch (t) {
    case ActDtype::kBf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case ActDtype::kFp16: return __half2float(static_cast<const __half*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void store_act(void* base, ActDtype t, int64_t i, float v) {
  switch (t) {
    case ActDtype::kBf16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); break;
    case ActDtype::kFp16: static_cast<__half*>(base)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(base)[i] = v; break;
  }
}
// Elements i and i + 1: one 4-byte store for 16-bit types when element i is 4-byte aligned.
__device__ __forceinline__ void store_act2(void* base, ActDtype t, int64_t i, float v0, float v1) {
  if (t != ActDtype::kFp32 && ((reinterpret_cast<uintptr_t>(base) + 2 * i) & 3) == 0) {
    uint32_t* p = reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(base) + i);
    *p = t == ActDtype::kBf16 ? pack2<__nv_bfloat16>(v0, v1) : pack2<__half>(v0, v1);
    return;
  }
  store_act(base, t, i, v0);
  store_act(base, t, i + 1, v1);
}

}  // namespace soartune::kernels::attn_detail
