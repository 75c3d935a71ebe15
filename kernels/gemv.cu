#include "kernels/gemv.cuh"

#include "core/kernel_variants.h"
#include "kernels/bulk_copy.cuh"
#include "kernels/launch.cuh"
#include "kernels/mma_bf16.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

namespace soartune::kernels {
namespace {

// Values of one 16-byte chunk of a weight row.
template <WeightFormat F>
constexpr int kValuesPerChunk = F == WeightFormat::kInt4 ? 32 : F == WeightFormat::kInt8 ? 16 : 8;

// (x & mask) | bits in one LOP3: written out, as the compiler emits an AND and an OR for two immediates.
__device__ __forceinline__ uint32_t and_or(uint32_t x, uint32_t mask, uint32_t bits) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(x), "r"(mask), "r"(bits));
  return r;
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __nv_bfloat162 bits_bf16x2(uint32_t u) {
  return *reinterpret_cast<__nv_bfloat162*>(&u);
}

// The four int8 codes of a word as exact floats: byte b (offset by 128) under the fp32 exponent of 2^23 reads
// 2^23 + b exactly.
__device__ __forceinline__ void int8_word(uint32_t w, float (&f)[4]) {
  const uint32_t u = w ^ 0x80808080u;
  f[0] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440)) - 8388736.0f;
  f[1] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7441)) - 8388736.0f;
  f[2] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7442)) - 8388736.0f;
  f[3] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7443)) - 8388736.0f;
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
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float f[4];
      int8_word(w[i], f);
      p[2 * i] = bf16x2_bits(__floats2bfloat162_rn(f[0] * s, f[1] * s));
      p[2 * i + 1] = bf16x2_bits(__floats2bfloat162_rn(f[2] * s, f[3] * s));
    }
  } else {
    // A nibble u under the bf16 pattern of 128 (0x4300) reads 128 + u exactly; stored u = q + 8.
    const __nv_bfloat162 s2 = __float2bfloat162_rn(s);
    const __nv_bfloat162 off = __float2bfloat162_rn(136.0f);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t v = and_or(w[j] >> (4 * i), 0x000F000Fu, 0x43004300u);
        p[4 * j + i] = bf16x2_bits(__hmul2(__hsub2(bits_bf16x2(v), off), s2));
      }
    }
  }
}

// Quantised codes without their scale, for a step whose four chunks share one scale group (the scale is
// applied to the step's fp32 partial sums instead, once a row, add_scaled): int8 as exact q (no multiply);
// int4 as bf16 128 + u (u = q + 8; shift and one LOP3 a pair) less 136, exact (no multiply).
template <WeightFormat F>
__device__ __forceinline__ void dequant_chunk_raw(const uint4& raw, uint32_t (&p)[kValuesPerChunk<F> / 2]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (F == WeightFormat::kInt8) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float f[4];
      int8_word(w[i], f);
      p[2 * i] = bf16x2_bits(__floats2bfloat162_rn(f[0], f[1]));
      p[2 * i + 1] = bf16x2_bits(__floats2bfloat162_rn(f[2], f[3]));
    }
  } else if constexpr (F == WeightFormat::kInt4) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t v = and_or(w[j] >> (4 * i), 0x000F000Fu, 0x43004300u);
        p[4 * j + i] = bf16x2_bits(__hsub2(bits_bf16x2(v), bits_bf16x2(0x43084308u)));  // - 136: q, exact
      }
  }
}

// One thread's mma B fragment: V / 8 16-byte loads of x (shared memory, or global through the read-only
// path), kept as V / 2 bf16 pairs in chunk order.
template <int V, bool kShared>
__device__ __forceinline__ void load_x_fragment(const uint4* xp, uint32_t (&xb)[V / 2]) {
#pragma unroll
  for (int i = 0; i < V / 8; ++i) {
    const uint4 v = kShared ? xp[i] : __ldg(xp + i);
    xb[4 * i] = v.x;
    xb[4 * i + 1] = v.y;
    xb[4 * i + 2] = v.z;
    xb[4 * i + 3] = v.w;
  }
}

template <int V>
__device__ __forceinline__ void zero_fragment(uint32_t (&xb)[V / 2]) {
#pragma unroll
  for (int i = 0; i < V / 2; ++i) xb[i] = 0u;
}

// One step of a quad's four chunks into acc: pa0 / pa1 rows g / g + 8, xb batch column g (mma k-slots as
// gemv_kernel describes).
template <int V>
__device__ __forceinline__ void mma_step(float (&acc)[4], const uint32_t (&pa0)[V / 2], const uint32_t (&pa1)[V / 2],
                                         const uint32_t (&xb)[V / 2]) {
#pragma unroll
  for (int m = 0; m < V / 4; ++m) mma_bf16_16816(acc, pa0[2 * m], pa1[2 * m], pa0[2 * m + 1], pa1[2 * m + 1], xb[2 * m], xb[2 * m + 1]);
}

// acc += row scale * part: elements 0, 1 are row g (scale s0), 2, 3 row g + 8 (s1).
__device__ __forceinline__ void add_scaled(float (&acc)[4], const float (&part)[4], float s0, float s1) {
  acc[0] += s0 * part[0];
  acc[1] += s0 * part[1];
  acc[2] += s1 * part[2];
  acc[3] += s1 * part[3];
}

// One warp's m16n8 accumulator tile into red[row][col] (row pitch P floats) at rows 0..15, cols 0..7.
template <int P>
__device__ __forceinline__ void stage_partials(float* red, const float (&acc)[4], int g, int t) {
  red[g * P + 2 * t] = acc[0];
  red[g * P + 2 * t + 1] = acc[1];
  red[(g + 8) * P + 2 * t] = acc[2];
  red[(g + 8) * P + 2 * t + 1] = acc[3];
}

struct KernelArgs {
  const uint8_t* w;
  const float* scales;
  const __nv_bfloat16* x;
  void* y;
  int n, k, group, batch;
  uint32_t group_magic;  // chunk c's scale group is __umulhi(2 c, group_magic) (group_of)
  int64_t x_stride, y_stride;
  bool out_bf16;
  bool accumulate;
  bool swiglu;
  const float* norm_residual;  // fused RMSNorm (pipelined form): x = bf16(residual * rstd * gamma)
  const float* norm_gamma;
  float norm_eps;
};

// c / chunks_per_group without a division: group_magic = ceil(2^32 / (2 chunks_per_group)), exact while
// 2 c * 2 chunks_per_group < 2^32 (c < 2^15 chunks).
__device__ __forceinline__ int group_of(const KernelArgs& a, int c) {
  return int(__umulhi(uint32_t(2 * c), a.group_magic));
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Sums the W warps' partials red[W][kRows][kCols + 1] and writes rows row0.. of y (fp32, bf16, or added into
// fp32), threads `tid` of `nthreads` sharing the work.
template <int W, int kRows, int kCols>
__device__ __forceinline__ void store_rows(const KernelArgs& a, const float* red, int row0, int tid, int nthreads) {
  auto sum = [&](int r, int b) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) s += red[(w * kRows + r) * (kCols + 1) + b];
    return s;
  };
  // The loops stay rolled (`unroll 1`; so does the pipelined form's producer loop): at batch <= 8 most
  // variants have a thread for every output, so the copies the compiler unrolled only lengthened the code.
  // Measured with both against without, same call (docs/perf-log run 52): int4 g128 decode b8 2.829 -> 2.739
  // ms, int8 b8 -0.8%, the rest level or better.
  if (a.swiglu) {  // rows 16q .. 16q + 7 are gate rows 8q .., the next eight the matching up rows
#pragma unroll 1
    for (int idx = tid; idx < kRows / 2 * kCols; idx += nthreads) {
      const int b = idx / (kRows / 2), j = idx % (kRows / 2);
      const int r = j / 8 * 16 + j % 8;
      if (b >= a.batch || row0 + r >= a.n) continue;
      // Rounded to bf16 first, as the unfused gate|up output is, then silu(g) * u as kernels/activation.cu.
      const float gt = round_bf16(sum(r, b)), up = round_bf16(sum(r + 8, b));
      reinterpret_cast<__nv_bfloat16*>(a.y)[b * a.y_stride + row0 / 2 + j] =
          __float2bfloat16_rn(gt / (1.f + __expf(-gt)) * up);
    }
    return;
  }
#pragma unroll 1
  for (int idx = tid; idx < kRows * kCols; idx += nthreads) {
    const int b = idx / kRows, r = idx % kRows;
    const int row = row0 + r;
    if (b >= a.batch || row >= a.n) continue;
    const float s = sum(r, b);
    if (a.out_bf16) {
      reinterpret_cast<__nv_bfloat16*>(a.y)[b * a.y_stride + row] = __float2bfloat16_rn(s);
    } else {
      float* y = reinterpret_cast<float*>(a.y) + b * a.y_stride + row;
      *y = a.accumulate ? *y + s : s;
    }
  }
}

// One step's weight chunks (U groups of a warp's four chunks, rows g and g + 8 of each m-tile) and their scales:
// loads issued, not waited for.
template <WeightFormat F, int M, int W, int U>
__device__ __forceinline__ void load_step(const KernelArgs& a, int base, int t, const int (&rows)[M][2], int nchunks,
                                          int64_t row_bytes, int groups_per_row, uint4 (&wa)[U][M][2],
                                          float (&sc)[U][M][2]) {
  constexpr bool kQuant = F == WeightFormat::kInt8 || F == WeightFormat::kInt4;
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
          sc[u][mt][h] = kQuant ? __ldg(a.scales + int64_t(r) * groups_per_row + group_of(a, c)) : 1.f;
        } else {
          wa[u][mt][h] = make_uint4(0, 0, 0, 0);
          sc[u][mt][h] = 0.f;
        }
      }
  }
}

// One step's mma work on chunks already loaded: dequantise, load x, accumulate.
template <WeightFormat F, int M, int W, int U, int NT, bool SA>
__device__ __forceinline__ void mma_chunks(const KernelArgs& a, int base, int g, int t, int nchunks,
                                           const uint4 (&wa)[U][M][2], const float (&sc)[U][M][2],
                                           float (&acc)[M][NT][4]) {
  constexpr int V = kValuesPerChunk<F>;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = base + u * W * 4 + t;
    const bool cv = c < nchunks;
    if (base + u * W * 4 >= nchunks) break;  // warp-uniform: no chunk of this step exists
    uint32_t pa[M][2][V / 2];
#pragma unroll
    for (int mt = 0; mt < M; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (SA)
          dequant_chunk_raw<F>(wa[u][mt][h], pa[mt][h]);
        else
          dequant_chunk<F>(wa[u][mt][h], sc[u][mt][h], pa[mt][h]);
      }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int b = nt * 8 + g;
      uint32_t xb[V / 2];
      if (cv && b < a.batch)
        load_x_fragment<V, false>(reinterpret_cast<const uint4*>(a.x + b * a.x_stride + int64_t(c) * V), xb);
      else
        zero_fragment<V>(xb);
      if constexpr (SA) {
#pragma unroll
        for (int mt = 0; mt < M; ++mt) {
          float part[4] = {0.f, 0.f, 0.f, 0.f};
          mma_step<V>(part, pa[mt][0], pa[mt][1], xb);
          add_scaled(acc[mt][nt], part, sc[u][mt][0], sc[u][mt][1]);
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < M; ++mt) mma_step<V>(acc[mt][nt], pa[mt][0], pa[mt][1], xb);
      }
    }
  }
}

// Thread (g = lane / 4, t = lane % 4) of a warp loads, for its chunk c, rows g and g + 8 of each m-tile and
// x[b = g of each batch tile][chunk c]. The mma k-slots 2t, 2t+1 (and 2t+8, 2t+9) of mma m hold the chunk's
// pairs 2m (and 2m+1) in both A and B, so the warp's dot product runs over 4 chunks in a permuted k order.
// P (prefetch): the next step's loads are issued before this step's mma work, from a second set of registers,
// so a warp keeps its bytes in flight while it computes (without P it issues a step's loads, waits for them and
// computes, and the SM relies on its other warps to cover the wait).
template <WeightFormat F, int M, int W, int U, int NT, bool SA, bool P>
__device__ __forceinline__ void gemv_body(const KernelArgs& a) {
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

  constexpr int kStep = W * 4 * U;
  uint4 wa[U][M][2];
  float sc[U][M][2];
  if constexpr (P) {
    if (warp * 4 < nchunks) load_step<F, M, W, U>(a, warp * 4, t, rows, nchunks, row_bytes, groups_per_row, wa, sc);
    pdl_wait();
    for (int base = warp * 4; base < nchunks; base += kStep) {
      uint4 cw[U][M][2];
      float cs[U][M][2];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int mt = 0; mt < M; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            cw[u][mt][h] = wa[u][mt][h];
            cs[u][mt][h] = sc[u][mt][h];
          }
      if (base + kStep < nchunks)
        load_step<F, M, W, U>(a, base + kStep, t, rows, nchunks, row_bytes, groups_per_row, wa, sc);
      mma_chunks<F, M, W, U, NT, SA>(a, base, g, t, nchunks, cw, cs, acc);
    }
  } else {
    for (int base = warp * 4; base < nchunks; base += kStep) {
      load_step<F, M, W, U>(a, base, t, rows, nchunks, row_bytes, groups_per_row, wa, sc);
      if (base == warp * 4) pdl_wait();
      mma_chunks<F, M, W, U, NT, SA>(a, base, g, t, nchunks, wa, sc, acc);
    }
  }

  pdl_wait();  // warps without a chunk skipped the loop's wait
  // Reduce the warps' partials: red[warp][row in CTA][batch column], padded against bank conflicts.
  constexpr int kRows = 16 * M, kCols = 8 * NT;
  __shared__ float red[W][kRows][kCols + 1];
#pragma unroll
  for (int mt = 0; mt < M; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) stage_partials<kCols + 1>(&red[warp][mt * 16][nt * 8], acc[mt][nt], g, t);
  __syncthreads();
  store_rows<W, kRows, kCols>(a, &red[0][0][0], row0, threadIdx.x, W * 32);
}

template <WeightFormat F, int M, int W, int U, int NT, bool SA, bool P>
__global__ void __launch_bounds__(W * 32) gemv_kernel(const KernelArgs a) {
  gemv_body<F, M, W, U, NT, SA, P>(a);
}

// The same with registers capped so that MB CTAs fit an SM (more warps to hide the loads); launched at batch
// <= 8 only (one batch tile), larger batches take gemv_kernel. (A separate kernel: even a minimum of one CTA
// changes ptxas's register choice, 76 -> 84 for int4 m1w8u2, which fits two of its CTAs an SM instead of
// three: int4 g128 decode 2.25 -> 2.64 ms, docs/perf-log run 39.)
template <WeightFormat F, int M, int W, int U, int NT, bool SA, int MB, bool P>
__global__ void __launch_bounds__(W * 32, MB) gemv_capped_kernel(const KernelArgs a) {
  gemv_body<F, M, W, U, NT, SA, P>(a);
}

// The pipelined form: one CTA an SM loops over the 16-row tiles blockIdx.x, blockIdx.x + gridDim.x, ...
// (rows are contiguous, so a tile is one block of memory), and a producer warp streams each tile through
// S shared-memory stages of 16 rows x RB bytes with TMA bulk copies (one a row, issued by one lane each), S
// stages ahead of W consumer warps.
// Bytes in flight stay at S x 16 x RB an SM through the consumers' mma work, their reductions and the tile
// boundaries (the direct-load form above has a burst of loads a step and a wave of CTAs a tile), the grid has
// no tail wave, and the producer, which never waits for PDL, fills its stages while the previous kernel drains. Consumers map chunks to mma k-slots as gemv_kernel does; a stage's rows sit
// RB + 64 bytes apart, which puts the eight rows of a quarter-warp's 16-byte loads in distinct banks.
// Where x fits beside the stages, the consumers read it from shared memory, staged once a CTA ([batch][k]
// bf16, rows 2k + 64 bytes apart), so its loads never wait on L1 / L2 inside the loop; a fused RMSNorm is
// computed from the fp32 residual stream by that staging (and so needs the room). Else x comes from L1 / L2.
// (Its shared memory without x: core::gemv_pipe_smem_bytes, which the variant table's can_implement checks.)
constexpr size_t pipe_smem_bytes(int W, int S, int RB, int NT) { return core::gemv_pipe_smem_bytes(W, S, RB, NT); }
constexpr size_t kPipeSmemLimit = core::kGemvPipeSmemLimit;
inline size_t pipe_x_bytes(int batch, int k) { return size_t(batch) * (size_t(k) * 2 + 64); }

template <WeightFormat F, int W, int S, int RB, int NT, bool XS, bool SA>
__global__ void __launch_bounds__((W + 1) * 32, 1) gemv_pipe_kernel(const KernelArgs a) {
  constexpr int kPipeRowBytes = RB;
  constexpr int kPipeRowPitch = RB + 64;
  constexpr int kPipeStageBytes = 16 * kPipeRowPitch;
  pdl_launch_dependents();
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int V = kValuesPerChunk<F>;
  constexpr bool kQuant = F == WeightFormat::kInt8 || F == WeightFormat::kInt4;
  constexpr int kStageChunks = kPipeRowBytes / 16;
  constexpr int U = kStageChunks / (4 * W);
  static_assert(U >= 1 && U * 4 * W == kStageChunks, "W must divide the stage's chunk groups");
  constexpr int kCols = 8 * NT;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S * kPipeStageBytes);
  uint64_t* empty = full + S;
  float* red = reinterpret_cast<float*>(empty + S);  // [W][16][kCols + 1]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int nchunks = a.k / V;
  const int64_t row_bytes = int64_t(nchunks) * 16;
  const int spt = int((row_bytes + kPipeRowBytes - 1) / kPipeRowBytes);  // stages a tile
  const int tiles = (a.n + 15) / 16;
  const int my_tiles = (tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
  const int total = my_tiles * spt;
  const int groups_per_row = kQuant ? a.k / a.group : 0;

  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], W);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == W) {  // producer: weights only (no kernel writes them), so no PDL wait
    const uint64_t policy = l2_evict_first_policy();
    // Scale rows start 16-byte aligned when groups_per_row % 4 == 0; prefetched whole (else not at all).
    const uint32_t scale_row_bytes = kQuant && groups_per_row % 4 == 0 ? uint32_t(groups_per_row) * 4 : 0;
    // Rolled (`unroll 1`, with store_rows' loops; docs/perf-log run 52): otherwise unrolled three times.
#pragma unroll 1
    for (int it = 0; it < total; ++it) {
      const int tile = int(blockIdx.x) + (it / spt) * int(gridDim.x), st = it % spt;
      const int s = it % S, use = it / S;
      if (use > 0) mbar_wait(&empty[s], (use - 1) & 1);
      const int64_t off = int64_t(st) * kPipeRowBytes;
      const uint32_t bytes = uint32_t(row_bytes - off < kPipeRowBytes ? row_bytes - off : kPipeRowBytes);
      const int rows = a.n - tile * 16 < 16 ? a.n - tile * 16 : 16;
      if (lane == 0) mbar_arrive_expect_tx(&full[s], bytes * rows);
      // A tile's scale rows into L2 with its first stage, S stages before the consumers read them (from
      // global, one stage ahead: too late for DRAM, in time for L2).
      if (kQuant && st == 0 && lane < rows && scale_row_bytes > 0)
        bulk_prefetch_l2(a.scales + (int64_t(tile) * 16 + lane) * groups_per_row, scale_row_bytes);
      if (lane < rows)
        bulk_copy_g2s(smem + s * kPipeStageBytes + lane * kPipeRowPitch,
                      a.w + (int64_t(tile) * 16 + lane) * row_bytes + off, bytes, &full[s], policy);
    }
    return;
  }

  pdl_wait();  // consumers read x and write y
  uint8_t* xs = smem + pipe_smem_bytes(W, S, RB, NT);
  const int x_pitch = a.k * 2 + 64;
  if constexpr (XS) {
    const int ct = threadIdx.x, nct = W * 32;
    float rstd[kGemvMaxNormBatch];
    if (a.norm_residual) {  // rstd of each row, as rmsnorm_kernel computes it
      float ss[kGemvMaxNormBatch];
#pragma unroll
      for (int b = 0; b < kGemvMaxNormBatch; ++b) ss[b] = 0.f;
#pragma unroll
      for (int b = 0; b < kGemvMaxNormBatch; ++b) {
        if (b >= a.batch) break;
        const float4* r = reinterpret_cast<const float4*>(a.norm_residual + b * a.x_stride);
        for (int i = ct; i < a.k / 4; i += nct) {
          const float4 v = r[i];
          ss[b] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
      }
#pragma unroll
      for (int b = 0; b < kGemvMaxNormBatch; ++b) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss[b] += __shfl_xor_sync(0xffffffffu, ss[b], o);
        if (lane == 0) red[warp * kGemvMaxNormBatch + b] = ss[b];
      }
      named_barrier(1, nct);
#pragma unroll
      for (int b = 0; b < kGemvMaxNormBatch; ++b) {
        float tot = 0.f;
        for (int w = 0; w < W; ++w) tot += red[w * kGemvMaxNormBatch + b];
        rstd[b] = rsqrtf(tot / float(a.k) + a.norm_eps);
      }
    }
    for (int b = 0; b < a.batch; ++b) {
      for (int i = ct; i < a.k / 8; i += nct) {
        uint4 v;
        if (a.norm_residual) {
          const float4* r = reinterpret_cast<const float4*>(a.norm_residual + b * a.x_stride) + 2 * i;
          const float4* gm = reinterpret_cast<const float4*>(a.norm_gamma) + 2 * i;
          const float4 r0 = r[0], r1 = r[1], g0 = gm[0], g1 = gm[1];
          float rs = 0.f;
#pragma unroll
          for (int bb = 0; bb < kGemvMaxNormBatch; ++bb) rs = bb == b ? rstd[bb] : rs;
          v.x = bf16x2_bits(__floats2bfloat162_rn(r0.x * rs * g0.x, r0.y * rs * g0.y));
          v.y = bf16x2_bits(__floats2bfloat162_rn(r0.z * rs * g0.z, r0.w * rs * g0.w));
          v.z = bf16x2_bits(__floats2bfloat162_rn(r1.x * rs * g1.x, r1.y * rs * g1.y));
          v.w = bf16x2_bits(__floats2bfloat162_rn(r1.z * rs * g1.z, r1.w * rs * g1.w));
        } else {
          v = __ldg(reinterpret_cast<const uint4*>(a.x + b * a.x_stride) + i);
        }
        *reinterpret_cast<uint4*>(xs + b * x_pitch + i * 16) = v;
      }
    }
    named_barrier(1, nct);  // x is staged (and red is free again)
  }
  float acc[NT][4];
  float sc[U][2], sc_next[U][2];
  // Scales of iteration `it` for this thread's chunks (rows g, g + 8), fetched one stage ahead.
  auto load_scales = [&](int it, float (&out)[U][2]) {
#pragma unroll
    for (int u = 0; u < U; ++u) out[u][0] = out[u][1] = 1.f;
    if constexpr (kQuant) {
      if (it >= total) return;
      const int tile = int(blockIdx.x) + (it / spt) * int(gridDim.x), st = it % spt;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = st * kStageChunks + (warp + u * W) * 4 + t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = tile * 16 + g + 8 * h;
          out[u][h] = c < nchunks && r < a.n ? __ldg(a.scales + int64_t(r) * groups_per_row + group_of(a, c)) : 0.f;
        }
      }
    }
  };
  load_scales(0, sc_next);
  for (int it = 0; it < total; ++it) {
    const int tile = int(blockIdx.x) + (it / spt) * int(gridDim.x), st = it % spt;
    const int s = it % S;
    if (st == 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) sc[u][0] = sc_next[u][0], sc[u][1] = sc_next[u][1];
    load_scales(it + 1, sc_next);
    const int stage_chunks = int(row_bytes - int64_t(st) * kPipeRowBytes < kPipeRowBytes
                                     ? (row_bytes - int64_t(st) * kPipeRowBytes) / 16
                                     : kStageChunks);
    mbar_wait(&full[s], (it / S) & 1);
    const uint8_t* stage = smem + s * kPipeStageBytes;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int jb = (warp + u * W) * 4;
      if (jb >= stage_chunks) break;  // warp-uniform
      const int j = jb + t;
      const bool cv = j < stage_chunks;
      const int c = st * kStageChunks + j;
      uint4 wa[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const bool ok = cv && tile * 16 + g + 8 * h < a.n;
        wa[h] = ok ? *reinterpret_cast<const uint4*>(stage + (g + 8 * h) * kPipeRowPitch + j * 16) : make_uint4(0, 0, 0, 0);
      }
      uint32_t pa[2][V / 2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (SA)
          dequant_chunk_raw<F>(wa[h], pa[h]);
        else
          dequant_chunk<F>(wa[h], sc[u][h], pa[h]);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int b = nt * 8 + g;
        uint32_t xb[V / 2];
        if (cv && b < a.batch)
          load_x_fragment<V, XS>(XS ? reinterpret_cast<const uint4*>(xs + b * x_pitch + c * V * 2)
                                    : reinterpret_cast<const uint4*>(a.x + b * a.x_stride + int64_t(c) * V),
                                 xb);
        else
          zero_fragment<V>(xb);
        if constexpr (SA) {
          float part[4] = {0.f, 0.f, 0.f, 0.f};
          mma_step<V>(part, pa[0], pa[1], xb);
          add_scaled(acc[nt], part, sc[u][0], sc[u][1]);
        } else {
          mma_step<V>(acc[nt], pa[0], pa[1], xb);
        }
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);
    if (st == spt - 1) {  // the tile's last stage: reduce over the consumer warps and store
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) stage_partials<kCols + 1>(red + (warp * 16) * (kCols + 1) + nt * 8, acc[nt], g, t);
      named_barrier(1, W * 32);
      store_rows<W, 16, kCols>(a, red, tile * 16, threadIdx.x, W * 32);
      named_barrier(1, W * 32);
    }
  }
}

using core::GemvVariant;
using core::kGemvVariants;
using core::kNumGemvVariants;

// Quantised layers whose scale groups span whole steps (four chunks of a quad, group % (4 * values a chunk)
// == 0: int4 g128 / g256 / per row, int8 g64 and up) scale each step's fp32 partial sums once a row instead of
// every weight: int4 one LOP3 a weight pair in place of shift, LOP3, HSUB2 and HMUL2.
template <WeightFormat F>
bool scale_after_mma(const KernelArgs& ka) {
  return (F == WeightFormat::kInt8 || F == WeightFormat::kInt4) && ka.group % (4 * kValuesPerChunk<F>) == 0;
}

template <WeightFormat F, int M, int W, int U, int NT, bool SA, int MB, bool P>
cudaError_t launch_direct_sa(const KernelArgs& ka, int grid, cudaStream_t stream) {
  if constexpr (MB > 1 && NT == 1)
    return launch(gemv_capped_kernel<F, M, W, U, NT, SA, MB, P>, grid, W * 32, 0, stream, ka);
  else
    return launch(gemv_kernel<F, M, W, U, NT, SA, P>, grid, W * 32, 0, stream, ka);
}

template <WeightFormat F, int M, int W, int U, int NT, int MB, bool P>
cudaError_t launch_direct(const KernelArgs& ka, int grid, cudaStream_t stream) {
  if constexpr (F == WeightFormat::kInt8 || F == WeightFormat::kInt4)
    if (scale_after_mma<F>(ka)) return launch_direct_sa<F, M, W, U, NT, true, MB, P>(ka, grid, stream);
  return launch_direct_sa<F, M, W, U, NT, false, MB, P>(ka, grid, stream);
}

template <WeightFormat F, int M, int W, int U, int MB, bool P>
cudaError_t launch_nt(const KernelArgs& ka, int n_tiles, int grid, cudaStream_t stream) {
  switch (n_tiles) {
    case 1: return launch_direct<F, M, W, U, 1, MB, P>(ka, grid, stream);
    case 2: return launch_direct<F, M, W, U, 2, MB, P>(ka, grid, stream);
    case 3: return launch_direct<F, M, W, U, 3, MB, P>(ka, grid, stream);
    case 4: return launch_direct<F, M, W, U, 4, MB, P>(ka, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <WeightFormat F, int W, int S, int RB, int NT, bool XS, bool SA>
cudaError_t launch_pipe_kernel(const KernelArgs& ka, int grid, size_t smem, cudaStream_t stream) {
  static const cudaError_t attr = cudaFuncSetAttribute(gemv_pipe_kernel<F, W, S, RB, NT, XS, SA>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       int(XS ? kPipeSmemLimit : pipe_smem_bytes(W, S, RB, NT)));
  if (attr != cudaSuccess) return attr;
  return launch(gemv_pipe_kernel<F, W, S, RB, NT, XS, SA>, grid, (W + 1) * 32, smem, stream, ka);
}

template <WeightFormat F, int W, int S, int RB, int NT, bool XS>
cudaError_t launch_pipe_sa(const KernelArgs& ka, int grid, size_t smem, cudaStream_t stream) {
  if constexpr (F == WeightFormat::kInt8 || F == WeightFormat::kInt4)
    if (scale_after_mma<F>(ka)) return launch_pipe_kernel<F, W, S, RB, NT, XS, true>(ka, grid, smem, stream);
  return launch_pipe_kernel<F, W, S, RB, NT, XS, false>(ka, grid, smem, stream);
}

template <WeightFormat F, int W, int S, int RB, int NT>
cudaError_t launch_pipe_nt(const KernelArgs& ka, int grid, cudaStream_t stream) {
  const size_t base = pipe_smem_bytes(W, S, RB, NT), with_x = base + pipe_x_bytes(ka.batch, ka.k);
  if (base > kPipeSmemLimit) return cudaErrorInvalidValue;  // can_implement says so first
  if (with_x <= kPipeSmemLimit)  // x staged in shared memory (and a fused RMSNorm possible)
    return launch_pipe_sa<F, W, S, RB, NT, true>(ka, grid, with_x, stream);
  if (ka.norm_residual) return cudaErrorInvalidValue;  // can_implement says so first
  return launch_pipe_sa<F, W, S, RB, NT, false>(ka, grid, base, stream);
}

template <WeightFormat F, int W, int S, int RB>
cudaError_t launch_pipe(const KernelArgs& ka, int n_tiles, int grid, cudaStream_t stream) {
  switch (n_tiles) {
    case 1: return launch_pipe_nt<F, W, S, RB, 1>(ka, grid, stream);
    case 2: return launch_pipe_nt<F, W, S, RB, 2>(ka, grid, stream);
    case 3: return launch_pipe_nt<F, W, S, RB, 3>(ka, grid, stream);
    case 4: return launch_pipe_nt<F, W, S, RB, 4>(ka, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

// Variant I of core::kGemvVariants, its tile parameters as template arguments: the kernels instantiated are
// exactly the table's (a variant added there is compiled and dispatched here, with no second list).
template <WeightFormat F, int I>
cudaError_t launch_variant(const KernelArgs& ka, const GemvPlan& p, cudaStream_t stream) {
  constexpr GemvVariant v = kGemvVariants[I];
  if constexpr (v.pipelined())
    return launch_pipe<F, v.warps, v.stages, v.row_kb * 1024>(ka, p.n_tiles, p.grid, stream);
  else
    return launch_nt<F, v.m_tiles, v.warps, v.unroll, v.min_ctas, v.prefetch>(ka, p.n_tiles, p.grid, stream);
}

template <WeightFormat F, int... I>
cudaError_t launch_indexed(const KernelArgs& ka, const GemvPlan& p, cudaStream_t stream,
                           std::integer_sequence<int, I...>) {
  cudaError_t e = cudaErrorInvalidValue;
  ((p.variant == I ? (e = launch_variant<F, I>(ka, p, stream), true) : false) || ...);
  return e;
}

template <WeightFormat F>
cudaError_t launch_format(const KernelArgs& ka, const GemvPlan& p, cudaStream_t stream) {
  return launch_indexed<F>(ka, p, stream, std::make_integer_sequence<int, kNumGemvVariants>{});
}

int values_per_chunk(WeightFormat f) {
  switch (f) {
    case WeightFormat::kInt4: return 32;
    case WeightFormat::kInt8: return 16;
    default: return 8;
  }
}

int weight_bits(WeightFormat f) { return f == WeightFormat::kInt4 ? 4 : f == WeightFormat::kInt8 ? 8 : 16; }

// The variants auto chooses among (indices into core::kGemvVariants, checked when this file compiles).
constexpr int kTallDirect = core::gemv_variant_index("m1w8u2");
constexpr int kWideDirect = core::gemv_variant_index("m1w16u2");
constexpr int kTallCapped = core::gemv_variant_index("m1w8u2b4");
constexpr int kPipe4 = core::gemv_variant_index("m1w16s4k2");
constexpr int kPipe6 = core::gemv_variant_index("m1w16s6k2");
constexpr int kTallPair = core::gemv_variant_index("m2w8u2");
constexpr int kPrefetch = core::gemv_variant_index("m1w16u1p");
static_assert(kTallDirect >= 0 && kWideDirect >= 0 && kTallCapped >= 0 && kPipe4 >= 0 && kPipe6 >= 0 &&
                  kTallPair >= 0 && kPrefetch >= 0,
              "auto names a variant core::kGemvVariants does not hold");
// The pipelined variant a fused RMSNorm takes under "auto".
constexpr int kNormVariant = kPipe4;

size_t pipe_smem_bytes_of(const GemvVariant& v, int batch) { return core::gemv_pipe_smem_bytes(v, batch); }

bool pipe_fits_with_x(const GemvVariant& v, const GemvArgs& a) {
  return pipe_smem_bytes_of(v, a.batch) + pipe_x_bytes(a.batch, a.w.k) <= kPipeSmemLimit;
}

std::string variants_where(bool pipelined) {
  std::string s;
  for (const GemvVariant& v : kGemvVariants)
    if (v.pipelined() == pipelined) s += (s.empty() ? "" : ", ") + std::string(v.name);
  return s;
}

// The current device's compute capability major and SM count (-1 / 0 without a device).
int device_major() {
  int dev = 0, major = -1;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return major;
}

int device_sms() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return sms;
}

}  // namespace

void interleave_gate_up(uint8_t* rows, size_t row_bytes, float* scales, size_t scales_per_row, int f) {
  std::vector<uint8_t> w(rows, rows + size_t(2) * f * row_bytes);
  std::vector<float> sc;
  if (scales) sc.assign(scales, scales + size_t(2) * f * scales_per_row);
  for (int j = 0; j < f; ++j) {
    const size_t gate_to = size_t(j / 8) * 16 + j % 8, up_to = gate_to + 8;
    std::memcpy(rows + gate_to * row_bytes, w.data() + size_t(j) * row_bytes, row_bytes);
    std::memcpy(rows + up_to * row_bytes, w.data() + size_t(f + j) * row_bytes, row_bytes);
    if (scales) {
      std::memcpy(scales + gate_to * scales_per_row, sc.data() + size_t(j) * scales_per_row, scales_per_row * 4);
      std::memcpy(scales + up_to * scales_per_row, sc.data() + size_t(f + j) * scales_per_row, scales_per_row * 4);
    }
  }
}

std::string gemv_can_implement(const GemvArgs& a, const std::string& variant) {
  const int f = static_cast<int>(a.w.format);
  if (f < 0 || f > 3) return "weight format: " + std::to_string(f) + " is not one of bf16, fp16, int8, int4";
  const core::GemvShape shape{a.w.n, a.w.k, a.batch, weight_bits(a.w.format), is_quantized(a.w.format) ? a.w.group : 0};
  std::string err = core::gemv_can_implement(variant, shape);
  if (!err.empty()) return err;
  if (!a.w.w || !(a.x || a.norm_residual) || !a.y) return "pointers: w, x and y must be device pointers";
  if (a.accumulate && a.out_bf16) return "accumulate: only into an fp32 y (out_bf16 is set)";
  if (a.swiglu && (a.accumulate || !a.out_bf16))
    return "swiglu: writes bf16 silu(gate) * up; set out_bf16 and not accumulate";
  if (a.swiglu && a.w.n % 16 != 0)
    return "swiglu: n=" + std::to_string(a.w.n) + " must be a multiple of 16 (gate and up rows interleaved by 8)";
  if ((reinterpret_cast<uintptr_t>(a.w.w) | reinterpret_cast<uintptr_t>(a.x) |
       reinterpret_cast<uintptr_t>(a.norm_residual) | reinterpret_cast<uintptr_t>(a.norm_gamma)) % 16 != 0)
    return "pointers: w, x, norm_residual and norm_gamma must be 16-byte aligned";
  const int64_t xs = a.x_stride ? a.x_stride : a.w.k;
  if (xs % 8 != 0) return "x_stride: must be a multiple of 8 elements";
  const int index = core::gemv_variant_index(variant);  // -1 for auto
  const bool pipelined = index >= 0 && kGemvVariants[index].pipelined();
  if (a.norm_residual) {
    if (!pipelined && index >= 0)
      return "gemv_variant: " + variant + " cannot fuse RMSNorm; the pipelined variants can (" +
             variants_where(true) + ")";
    if (a.batch > kGemvMaxNormBatch)
      return "batch: " + std::to_string(a.batch) + " rows; a fused RMSNorm allows 1.." +
             std::to_string(kGemvMaxNormBatch);
    if (!a.norm_gamma) return "norm_gamma: a fused RMSNorm needs gamma";
    // The fused RMSNorm is staged in shared memory beside the stages.
    const GemvVariant& v = kGemvVariants[pipelined ? index : kNormVariant];
    const size_t need = pipe_smem_bytes_of(v, a.batch) + pipe_x_bytes(a.batch, a.w.k);
    if (need > kPipeSmemLimit)
      return "norm_residual: " + std::string(v.name) + " stages the normalised rows in shared memory: batch " +
             std::to_string(a.batch) + " x k " + std::to_string(a.w.k) + " needs " + std::to_string(need) +
             " bytes of shared memory, over " + std::to_string(kPipeSmemLimit) + "; run RMSNorm separately";
  }
  if (is_quantized(a.w.format) && !a.w.scales) return "scales: quantised weights need a scale pointer";
  return "";
}

std::string gemv_plan(const GemvArgs& a, const std::string& variant, GemvPlan* plan) {
  std::string err = gemv_can_implement(a, variant);
  if (!err.empty()) return err;
  GemvPlan p;
  p.n_tiles = (a.batch + 7) / 8;
  if (variant == core::kGemvAuto) {
    // By shape, as measured per layer on the H200 (docs/perf-log runs 12 and 18, llama3-8b). Layers with more
    // rows than columns (qkv, gate|up, lm_head) are fastest with m1w8u2: its 256-thread CTAs fit three (int4)
    // to five (bf16) an SM, so qkv's 384 row tiles run in one wave (m1w16u2 fits two, 1.45 waves); bf16 b1
    // qkv 0.594 against 0.646 ms, gate_up 2.083 against 2.146, int4 g128 b8 qkv 0.403 against 0.485. The
    // square and wide ones (o, down) are fastest with m1w16u2, whose 16 warps split a long row: bf16 b1 down
    // 1.130 against 1.291, int8 0.936 against 1.118. int8 takes m1w16u2 for every shape: whole-model decode
    // b1 / b8 3.935 / 4.096 ms against 3.936 / 4.151 by the shape rule (run 20); bf16 and int4 gain from it
    // (bf16 b1 4.739 against 4.823 with m1w16u2 everywhere, int4 g128 b8 3.113 against 3.230).
    const bool tall = a.w.n > a.w.k;
    p.variant = tall && a.w.format != WeightFormat::kInt8 ? kTallDirect : kWideDirect;
    // Quantised tall layers at batch <= 8: m1w8u2 with registers for four CTAs an SM (64 instead of 76-84;
    // the kernel is issue- and latency-bound with about 1.6 eligible warps a scheduler at three). Whole-model
    // decode against the rule above, same call (docs/perf-log run 40): int4 g128 b1 2.136 against 2.24 ms,
    // int4 g32 2.284 against 2.36 (b8 2.84 against 2.97); int8 b1 3.035 against 3.13 with m1w16u2 (and
    // 3.02-3.04 with plain m1w8u2: int8's tall layers no longer want 16 warps since its scales moved after
    // the mma). Capping the other layers' m1w16u2 at three CTAs (40 registers, spills) or m1w8u2 at five was
    // slower in every format (run 40); so were four warps a tile at eight CTAs (run 39), and the other direct
    // variants in place of either rule (runs 39-46, measured with experiment switches since removed).
    if (tall && is_quantized(a.w.format) && a.batch <= 8) p.variant = kTallCapped;
    // Batches 2..8 (16-bit) and 5..8 (int4): each layer of synthetic:minicpm-sala-9b timed with every variant
    // forced (docs/perf-log run 77, H100, eager ms a step at b8): 16-bit layers take m1w16u1p, whose warps issue
    // the next loads before their mma (qkv 1.568 against 1.599 by the rule above, o 0.612 against 0.657, gate|up
    // 3.240 against 3.439); int4 tall layers m2w8u2, two m-tiles sharing each x fragment (qkv 0.685 against
    // 0.718, gate|up 1.187 against 1.250), wide ones m1w16u1p (down 0.742 against 0.817). Whole-model decode
    // against the rule above, same call (run 78): sala bf16 b2 / b4 / b8 6.986 / 7.110 / 7.298 ms against 7.136 /
    // 7.353 / 7.718, int4 g128 b8 3.220 against 3.423; int4 b2 / b4 were slower (2.775 / 2.923 against 2.740 /
    // 2.904), hence 5..8; b5 / b6 / b7 under this rule 2.982 / 3.085 / 3.136 ms (run 83), between b4's 2.861 and
    // b8's 3.252. At batch 1 the rules above stay the fastest.
    if (a.batch >= 2 && a.batch <= 8 && !is_quantized(a.w.format)) p.variant = kPrefetch;
    if (a.batch >= 5 && a.batch <= 8 && a.w.format == WeightFormat::kInt4) p.variant = tall ? kTallPair : kPrefetch;
    // At batch 1 on sm_90, 16-bit layers stream best through the pipelined form: its producer runs ahead of
    // PDL's wait, filling four stages an SM while the previous kernel finishes (whole-model bf16 b1 4.627
    // against 4.666 ms, run 25; 4.596-4.613 with this rule, run 26; alone, under ncu, each layer is a little
    // slower). At batch 8 it is slower (5.081 against 4.912), and so it is for int8 / int4 layers; for the
    // bf16 lm_head of an int8 / int4 model it made no difference (run 26).
    if (a.batch == 1 && !is_quantized(a.w.format) && device_major() >= 9) p.variant = kPipe4;
    if (a.norm_residual) p.variant = kNormVariant;  // only the pipelined form fuses it
    // Six stages where x still fits beside them in shared memory, four where it does not: bf16 b1 4.404
    // against 4.447 with four everywhere and 4.410 with six everywhere (run 33).
    if (kGemvVariants[p.variant].pipelined() && pipe_fits_with_x(kGemvVariants[kPipe6], a)) p.variant = kPipe6;
  } else {
    p.variant = core::gemv_variant_index(variant);
  }
  const GemvVariant& v = kGemvVariants[p.variant];
  p.m_tiles = v.m_tiles;
  p.warps = v.warps;
  p.unroll = v.unroll;
  p.threads = v.warps * 32;
  p.grid = (a.w.n + 16 * v.m_tiles - 1) / (16 * v.m_tiles);
  if (v.pipelined()) {
    const int major = device_major(), sms = device_sms();
    if (major < 0 || sms <= 0) return "gemv_variant: " + std::string(v.name) + " needs a CUDA device to plan for";
    if (major < 9)
      return "gemv_variant: " + std::string(v.name) + " needs sm_90 or newer (TMA bulk copies); allowed here: " +
             variants_where(false);
    p.threads = (v.warps + 1) * 32;  // and the producer warp
    p.pipelined = true;
    p.grid = p.grid < sms ? p.grid : sms;
  }
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
  {
    const int v = values_per_chunk(a.w.format);
    const uint64_t d = is_quantized(a.w.format) ? uint64_t(2 * (a.w.group / v)) : 2;
    ka.group_magic = uint32_t(((uint64_t(1) << 32) + d - 1) / d);
  }
  ka.batch = a.batch;
  ka.x_stride = a.x_stride ? a.x_stride : a.w.k;
  ka.y_stride = a.y_stride ? a.y_stride : (a.swiglu ? a.w.n / 2 : a.w.n);
  ka.out_bf16 = a.out_bf16;
  ka.accumulate = a.accumulate;
  ka.swiglu = a.swiglu;
  ka.norm_residual = a.norm_residual;
  ka.norm_gamma = a.norm_gamma;
  ka.norm_eps = a.norm_eps;
  switch (a.w.format) {
    case WeightFormat::kBf16: return launch_format<WeightFormat::kBf16>(ka, p, stream);
    case WeightFormat::kFp16: return launch_format<WeightFormat::kFp16>(ka, p, stream);
    case WeightFormat::kInt8: return launch_format<WeightFormat::kInt8>(ka, p, stream);
    case WeightFormat::kInt4: return launch_format<WeightFormat::kInt4>(ka, p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace soartune::kernels
