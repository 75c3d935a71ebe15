#include "kernels/gemv.cuh"

#include "kernels/launch.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace soartune::kernels {
namespace {

// Values of one 16-byte chunk of a weight row.
template <WeightFormat F>
constexpr int kValuesPerChunk = F == WeightFormat::kInt4 ? 32 : F == WeightFormat::kInt8 ? 16 : 8;

__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __nv_bfloat162 bits_bf16x2(uint32_t u) {
  return *reinterpret_cast<__nv_bfloat162*>(&u);
}

// Turns one 16-byte chunk into V/2 bf16 pairs, pair p = elements 2p, 2p+1 of the chunk, times scale s.
template <WeightFormat F>
__device__ __forceinline__ void dequant_chunk(const uint4& raw, float s, uint32_t (&p)[kValuesPerChunk<F> / 2]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (F == WeightFormat::kBf16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = w[i];
  } else if constexpr (F == WeightFormat::kFp16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      p[i] = bf16x2_bits(__floats2bfloat162_rn(f.x, f.y));
    }
  } else if constexpr (F == WeightFormat::kInt8) {
    // Byte b (offset by 128) under the fp32 exponent of 2^23 reads 2^23 + b exactly.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t u = w[i] ^ 0x80808080u;
      const float f0 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440)) - 8388736.0f;
      const float f1 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7441)) - 8388736.0f;
      const float f2 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7442)) - 8388736.0f;
      const float f3 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7443)) - 8388736.0f;
      p[2 * i] = bf16x2_bits(__floats2bfloat162_rn(f0 * s, f1 * s));
      p[2 * i + 1] = bf16x2_bits(__floats2bfloat162_rn(f2 * s, f3 * s));
    }
  } else {
    // A nibble u under the bf16 pattern of 128 (0x4300) reads 128 + u exactly; stored u = q + 8.
    const __nv_bfloat162 s2 = __float2bfloat162_rn(s);
    const __nv_bfloat162 off = __float2bfloat162_rn(136.0f);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t v = ((w[j] >> (4 * i)) & 0x000F000Fu) | 0x43004300u;
        p[4 * j + i] = bf16x2_bits(__hmul2(__hsub2(bits_bf16x2(v), off), s2));
      }
    }
  }
}

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

struct KernelArgs {
  const uint8_t* w;
  const float* scales;
  const __nv_bfloat16* x;
  void* y;
  int n, k, group, batch;
  int64_t x_stride, y_stride;
  bool out_bf16;
  bool accumulate;
};

// Thread (g = lane / 4, t = lane % 4) of a warp loads, for its chunk c, rows g and g + 8 of each m-tile and
// x[b = g of each batch tile][chunk c]. The mma k-slots 2t, 2t+1 (and 2t+8, 2t+9) of mma m hold the chunk's
// pairs 2m (and 2m+1) in both A and B, so the warp's dot product runs over 4 chunks in a permuted k order.
template <WeightFormat F, int M, int W, int U, int NT>
__global__ void __launch_bounds__(W * 32) gemv_kernel(const KernelArgs a) {
  // PDL: the first weight loads go out before the wait (no kernel writes weights); x is read and y written
  // only after it.
  pdl_launch_dependents();
  constexpr int V = kValuesPerChunk<F>;
  constexpr bool kQuant = F == WeightFormat::kInt8 || F == WeightFormat::kInt4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * 16 * M;
  const int nchunks = a.k / V;
  const int64_t row_bytes = int64_t(nchunks) * 16;
  const int groups_per_row = kQuant ? a.k / a.group : 0;
  const int chunks_per_group = kQuant ? a.group / V : 1;

  float acc[M][NT][4];
#pragma unroll
  for (int mt = 0; mt < M; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;

  int rows[M][2];
#pragma unroll
  for (int mt = 0; mt < M; ++mt) {
    rows[mt][0] = row0 + mt * 16 + g;
    rows[mt][1] = row0 + mt * 16 + g + 8;
  }

  for (int base = warp * 4; base < nchunks; base += W * 4 * U) {
    uint4 wa[U][M][2];
    float sc[U][M][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + u * W * 4 + t;
      const bool cv = c < nchunks;
#pragma unroll
      for (int mt = 0; mt < M; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = rows[mt][h];
          if (cv && r < a.n) {
            wa[u][mt][h] = load_stream(a.w + r * row_bytes + int64_t(c) * 16);
            sc[u][mt][h] = kQuant ? __ldg(a.scales + int64_t(r) * groups_per_row + c / chunks_per_group) : 1.f;
          } else {
            wa[u][mt][h] = make_uint4(0, 0, 0, 0);
            sc[u][mt][h] = 0.f;
          }
        }
    }
    if (base == warp * 4) pdl_wait();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = base + u * W * 4 + t;
      const bool cv = c < nchunks;
      if (base + u * W * 4 >= nchunks) break;  // warp-uniform: no chunk of this step exists
      uint32_t pa[M][2][V / 2];
#pragma unroll
      for (int mt = 0; mt < M; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) dequant_chunk<F>(wa[u][mt][h], sc[u][mt][h], pa[mt][h]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int b = nt * 8 + g;
        uint32_t xb[V / 2];
        if (cv && b < a.batch) {
          const uint4* xp = reinterpret_cast<const uint4*>(a.x + b * a.x_stride + int64_t(c) * V);
#pragma unroll
          for (int i = 0; i < V / 8; ++i) {
            const uint4 v = __ldg(xp + i);
            xb[4 * i] = v.x;
            xb[4 * i + 1] = v.y;
            xb[4 * i + 2] = v.z;
            xb[4 * i + 3] = v.w;
          }
        } else {
#pragma unroll
          for (int i = 0; i < V / 2; ++i) xb[i] = 0u;
        }
#pragma unroll
        for (int mt = 0; mt < M; ++mt)
#pragma unroll
          for (int m = 0; m < V / 4; ++m)
            mma_bf16_16816(acc[mt][nt], pa[mt][0][2 * m], pa[mt][1][2 * m], pa[mt][0][2 * m + 1],
                           pa[mt][1][2 * m + 1], xb[2 * m], xb[2 * m + 1]);
      }
    }
  }

  pdl_wait();  // warps without a chunk skipped the loop's wait
  // Reduce the warps' partials: red[warp][row in CTA][batch column], padded against bank conflicts.
  constexpr int kRows = 16 * M, kCols = 8 * NT;
  __shared__ float red[W][kRows][kCols + 1];
#pragma unroll
  for (int mt = 0; mt < M; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      red[warp][mt * 16 + g][nt * 8 + 2 * t] = acc[mt][nt][0];
      red[warp][mt * 16 + g][nt * 8 + 2 * t + 1] = acc[mt][nt][1];
      red[warp][mt * 16 + g + 8][nt * 8 + 2 * t] = acc[mt][nt][2];
      red[warp][mt * 16 + g + 8][nt * 8 + 2 * t + 1] = acc[mt][nt][3];
    }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kRows * kCols; idx += W * 32) {
    const int b = idx / kRows, r = idx % kRows;
    const int row = row0 + r;
    if (b >= a.batch || row >= a.n) continue;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) s += red[w][r][b];
    if (a.out_bf16) {
      reinterpret_cast<__nv_bfloat16*>(a.y)[b * a.y_stride + row] = __float2bfloat16_rn(s);
    } else {
      float* y = reinterpret_cast<float*>(a.y) + b * a.y_stride + row;
      *y = a.accumulate ? *y + s : s;
    }
  }
}

struct Variant {
  const char* name;
  int m_tiles, warps, unroll;
};

constexpr Variant kVariants[] = {
    {"m1w8u2", 1, 8, 2},
    {"m1w8u4", 1, 8, 4},
    {"m2w8u2", 2, 8, 2},
    {"m2w4u4", 2, 4, 4},
    {"m1w16u2", 1, 16, 2},
};
constexpr int kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);

template <WeightFormat F, int M, int W, int U>
cudaError_t launch_nt(const KernelArgs& ka, int n_tiles, int grid, cudaStream_t stream) {
  switch (n_tiles) {
    case 1: return launch(gemv_kernel<F, M, W, U, 1>, grid, W * 32, 0, stream, ka);
    case 2: return launch(gemv_kernel<F, M, W, U, 2>, grid, W * 32, 0, stream, ka);
    case 3: return launch(gemv_kernel<F, M, W, U, 3>, grid, W * 32, 0, stream, ka);
    case 4: return launch(gemv_kernel<F, M, W, U, 4>, grid, W * 32, 0, stream, ka);
    default: return cudaErrorInvalidValue;
  }
}

template <WeightFormat F>
cudaError_t launch_format(const KernelArgs& ka, const GemvPlan& p, cudaStream_t stream) {
  switch (p.variant) {
    case 0: return launch_nt<F, 1, 8, 2>(ka, p.n_tiles, p.grid, stream);
    case 1: return launch_nt<F, 1, 8, 4>(ka, p.n_tiles, p.grid, stream);
    case 2: return launch_nt<F, 2, 8, 2>(ka, p.n_tiles, p.grid, stream);
    case 3: return launch_nt<F, 2, 4, 4>(ka, p.n_tiles, p.grid, stream);
    case 4: return launch_nt<F, 1, 16, 2>(ka, p.n_tiles, p.grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

int values_per_chunk(WeightFormat f) {
  switch (f) {
    case WeightFormat::kInt4: return 32;
    case WeightFormat::kInt8: return 16;
    default: return 8;
  }
}

int find_variant(const std::string& name) {
  for (int i = 0; i < kNumVariants; ++i)
    if (name == kVariants[i].name) return i;
  return -1;
}

std::string allowed_variants() {
  std::string s = "auto";
  for (const Variant& v : kVariants) s += std::string(", ") + v.name;
  return s;
}

}  // namespace

const std::vector<std::string>& gemv_variant_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Variant& x : kVariants) v.push_back(x.name);
    return v;
  }();
  return names;
}

std::string gemv_can_implement(const GemvArgs& a, const std::string& variant) {
  if (variant != "auto" && find_variant(variant) < 0)
    return "gemv_variant: " + variant + " is not one of " + allowed_variants();
  const int f = static_cast<int>(a.w.format);
  if (f < 0 || f > 3) return "weight format: " + std::to_string(f) + " is not one of bf16, fp16, int8, int4";
  if (a.batch < 1 || a.batch > kGemvMaxBatch)
    return "batch: " + std::to_string(a.batch) + " is not in 1.." + std::to_string(kGemvMaxBatch);
  const int v = values_per_chunk(a.w.format);
  if (a.w.n < 1) return "n: must be >= 1";
  if (a.w.k < v || a.w.k % v != 0)
    return "k: " + std::to_string(a.w.k) + " is not a positive multiple of " + std::to_string(v) + " for " +
           weight_format_name(a.w.format);
  if (!a.w.w || !a.x || !a.y) return "pointers: w, x and y must be device pointers";
  if (a.accumulate && a.out_bf16) return "accumulate: only into an fp32 y (out_bf16 is set)";
  if ((reinterpret_cast<uintptr_t>(a.w.w) | reinterpret_cast<uintptr_t>(a.x)) % 16 != 0)
    return "pointers: w and x must be 16-byte aligned";
  const int64_t xs = a.x_stride ? a.x_stride : a.w.k;
  if (xs % 8 != 0) return "x_stride: must be a multiple of 8 elements";
  if (is_quantized(a.w.format)) {
    if (!a.w.scales) return "scales: quantised weights need a scale pointer";
    if (a.w.group <= 0 || a.w.k % a.w.group != 0 || a.w.group % v != 0)
      return "group: " + std::to_string(a.w.group) + " must divide k=" + std::to_string(a.w.k) +
             " and be a multiple of " + std::to_string(v) + " for " + weight_format_name(a.w.format);
  }
  return "";
}

std::string gemv_plan(const GemvArgs& a, const std::string& variant, GemvPlan* plan) {
  std::string err = gemv_can_implement(a, variant);
  if (!err.empty()) return err;
  GemvPlan p;
  p.n_tiles = (a.batch + 7) / 8;
  if (variant == "auto") {
    // By shape, as measured per layer on the H200 (docs/PERF.md runs 12 and 18, llama3-8b). Layers with more
    // rows than columns (qkv, gate|up, lm_head) are fastest with m1w8u2: its 256-thread CTAs fit three (int4)
    // to five (bf16) an SM, so qkv's 384 row tiles run in one wave (m1w16u2 fits two, 1.45 waves); bf16 b1
    // qkv 0.594 against 0.646 ms, gate_up 2.083 against 2.146, int4 g128 b8 qkv 0.403 against 0.485. The
    // square and wide ones (o, down) are fastest with m1w16u2, whose 16 warps split a long row: bf16 b1 down
    // 1.130 against 1.291, int8 0.936 against 1.118. int8 takes m1w16u2 for every shape: whole-model decode
    // b1 / b8 3.935 / 4.096 ms against 3.936 / 4.151 by the shape rule (run 20); bf16 and int4 gain from it
    // (bf16 b1 4.739 against 4.823 with m1w16u2 everywhere, int4 g128 b8 3.113 against 3.230).
    const bool tall = a.w.n > a.w.k;
    p.variant = find_variant(tall && a.w.format != WeightFormat::kInt8 ? "m1w8u2" : "m1w16u2");
  } else {
    p.variant = find_variant(variant);
  }
  const Variant& v = kVariants[p.variant];
  p.m_tiles = v.m_tiles;
  p.warps = v.warps;
  p.unroll = v.unroll;
  p.threads = v.warps * 32;
  p.grid = (a.w.n + 16 * v.m_tiles - 1) / (16 * v.m_tiles);
  *plan = p;
  return "";
}

cudaError_t gemv_run(const GemvArgs& a, const GemvPlan& p, cudaStream_t stream) {
  KernelArgs ka;
  ka.w = static_cast<const uint8_t*>(a.w.w);
  ka.scales = a.w.scales;
  ka.x = static_cast<const __nv_bfloat16*>(a.x);
  ka.y = a.y;
  ka.n = a.w.n;
  ka.k = a.w.k;
  ka.group = a.w.group;
  ka.batch = a.batch;
  ka.x_stride = a.x_stride ? a.x_stride : a.w.k;
  ka.y_stride = a.y_stride ? a.y_stride : a.w.n;
  ka.out_bf16 = a.out_bf16;
  ka.accumulate = a.accumulate;
  switch (a.w.format) {
    case WeightFormat::kBf16: return launch_format<WeightFormat::kBf16>(ka, p, stream);
    case WeightFormat::kFp16: return launch_format<WeightFormat::kFp16>(ka, p, stream);
    case WeightFormat::kInt8: return launch_format<WeightFormat::kInt8>(ka, p, stream);
    case WeightFormat::kInt4: return launch_format<WeightFormat::kInt4>(ka, p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace soartune::kernels
