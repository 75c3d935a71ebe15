// Device helpers shared by the GEMV (gemv.cu), the quantised-weight GEMM (qgemm.cu) and the bf16 expansion
// (gemm.cu): a streaming 16-byte weight load, bf16 pair packing, int4 / int8 codes times their scale as bf16
// pairs, and the m16n8k16 bf16 tensor-core MMA.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace soartune::kernels {

// 16 bytes that no kernel writes (weights), read once: through the non-coherent path, not kept in L1.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// bf16(lo) in the low half, bf16(hi) in the high half, each rounded to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The eight int4 codes of one word (weight_format.h: element 2i in bits 4i..4i+3, element 2i + 1 in bits
// 16+4i..16+4i+3, stored q + 8) as bf16(q * s), rounded once: p[i] = elements 2i, 2i + 1.
__device__ __forceinline__ void int4_word_bf16(uint32_t word, float s, uint32_t* p) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int lo = int((word >> (4 * i)) & 0xFu) - 8;
    const int hi = int((word >> (16 + 4 * i)) & 0xFu) - 8;
    p[i] = pack_bf16x2(float(lo) * s, float(hi) * s);
  }
}

// The four int8 codes of one word (byte e = element e) as bf16(q * s): p[0] = elements 0, 1, p[1] = 2, 3.
__device__ __forceinline__ void int8_word_bf16(uint32_t word, float s, uint32_t* p) {
  const int8_t* q = reinterpret_cast<const int8_t*>(&word);
  p[0] = pack_bf16x2(float(q[0]) * s, float(q[1]) * s);
  p[1] = pack_bf16x2(float(q[2]) * s, float(q[3]) * s);
}

// d += A B: A 16x16 bf16 (row), B 16x8 bf16 (col), d 16x8 fp32, in the PTX fragment layout of m16n8k16: thread
// (g = lane / 4, t = lane % 4) holds a0 / a1 = A rows g / g + 8 at k 2t, 2t + 1, a2 / a3 the same at k + 8,
// b0 / b1 = B column g at k 2t, 2t + 1 / k + 8, and d rows g (d0, d1) and g + 8 (d2, d3) at columns 2t, 2t + 1.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace soartune::kernels
