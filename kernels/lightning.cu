#include "kernels/lightning.cuh"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/launch.cuh"
#include "kernels/numeric_formats.h"

namespace soartune::kernels {
namespace {

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float load_state(const float* p) { return *p; }
__device__ __forceinline__ float load_state(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_state(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_state(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
// What the state holds after a store: the fp32 value, or its bf16 rounding (kept in fp32 between updates).
__device__ __forceinline__ float stored_value(float, float v) { return v; }
__device__ __forceinline__ float stored_value(__nv_bfloat16, float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// ---- q/k norm + RoPE -------------------------------------------------------------------------------------
// A warp per (token, kQkHeadsPerWarp q or k heads): lane l holds the rotation pairs (j, j + d/2) for j = l,
// l + 32, ... of each of its heads; a head's RMSNorm sum of squares is one warp reduction. The angle
// pos * theta^(-2j/d) depends on the token and j only, so a lane forms its pairs' sines and cosines once for all
// its heads, and before the wait (positions come from the host before the step; the norm weights are weights),
// while the previous kernel drains: the fp64 pow and the reduction modulo 2 pi (at 60k positions an fp32 product
// is off by up to 4e-3 rad) leave the step's critical path. Sine and cosine in fp32. The heads' loads are all in
// flight at once. Four heads a warp pay at prefill (run 73: 185 against 301 us for 4096 tokens of a layer); a
// decode step's few tokens would leave most SMs idle (4 CTAs a token of 64 heads): up to kQkFewTokens tokens a
// warp takes one head (16 CTAs a token). A head's values are the same either way (the same operations per head).
constexpr int kQkWarps = 4;
constexpr int kQkFewTokens = 64;
constexpr int kQkMaxPairs = 4;  // head_dim <= 256

template <int kQkHeadsPerWarp>
__global__ void __launch_bounds__(kQkWarps * 32) lightning_qk_kernel(const LightningQkArgs a) {
  pdl_launch_dependents();
  const int t = blockIdx.x, lane = threadIdx.x % 32;
  const int head0 = (blockIdx.y * kQkWarps + threadIdx.x / 32) * kQkHeadsPerWarp;
  const int d = a.head_dim, half = d / 2, nh = a.heads + a.kv_heads;
  float cs[kQkMaxPairs], sn[kQkMaxPairs], gq[kQkMaxPairs][2], gk[kQkMaxPairs][2];
  const double pos = a.rope ? a.positions[t] : 0.0;
#pragma unroll
  for (int p = 0; p < kQkMaxPairs; ++p) {
    const int j = lane + 32 * p;
    cs[p] = 1.f, sn[p] = 0.f;
    gq[p][0] = gq[p][1] = gk[p][0] = gk[p][1] = 1.f;
    if (j >= half) continue;
    if (a.q_norm) gq[p][0] = a.q_norm[j], gq[p][1] = a.q_norm[j + half];
    if (a.k_norm) gk[p][0] = a.k_norm[j], gk[p][1] = a.k_norm[j + half];
    if (a.rope) {
      const double inv_freq = pow(double(a.rope_theta), -2.0 * j / d);
      const double ang = fmod(pos * inv_freq, 6.283185307179586);
      sincosf(float(ang), &sn[p], &cs[p]);
    }
  }
  pdl_wait();
  if (head0 >= nh) return;  // uniform over the warp; no barrier follows
  __nv_bfloat16* base = static_cast<__nv_bfloat16*>(a.qkv) + int64_t(t) * a.row_stride;
  float x1[kQkHeadsPerWarp][kQkMaxPairs], x2[kQkHeadsPerWarp][kQkMaxPairs];
#pragma unroll
  for (int hh = 0; hh < kQkHeadsPerWarp; ++hh) {
    const __nv_bfloat16* x = base + int64_t(head0 + hh) * d;
#pragma unroll
    for (int p = 0; p < kQkMaxPairs; ++p) {
      const int j = lane + 32 * p;
      const bool in = head0 + hh < nh && j < half;
      x1[hh][p] = in ? __bfloat162float(x[j]) : 0.f;
      x2[hh][p] = in ? __bfloat162float(x[j + half]) : 0.f;
    }
  }
#pragma unroll
  for (int hh = 0; hh < kQkHeadsPerWarp; ++hh) {
    const int head = head0 + hh;
    if (head >= nh) break;  // uniform over the warp
    const bool is_q = head < a.heads;
    const bool norm = (is_q ? a.q_norm : a.k_norm) != nullptr;
    float ss = 0;
#pragma unroll
    for (int p = 0; p < kQkMaxPairs; ++p) ss += x1[hh][p] * x1[hh][p] + x2[hh][p] * x2[hh][p];
    const float inv = norm ? rsqrtf(warp_sum(ss) / float(d) + a.eps) : 1.f;
    __nv_bfloat16* x = base + int64_t(head) * d;
#pragma unroll
    for (int p = 0; p < kQkMaxPairs; ++p) {
      const int j = lane + 32 * p;
      if (j >= half) break;
      float y1 = x1[hh][p] * inv, y2 = x2[hh][p] * inv;
      if (norm) {
        y1 *= is_q ? gq[p][0] : gk[p][0];
        y2 *= is_q ? gq[p][1] : gk[p][1];
      }
      if (a.rope) {
        const float r1 = y1 * cs[p] - y2 * sn[p], r2 = y2 * cs[p] + y1 * sn[p];
        y1 = r1, y2 = r2;
      }
      x[j] = __float2bfloat16_rn(y1);
      x[j + half] = __float2bfloat16_rn(y2);
    }
  }
}

// ---- decode: one token per sequence -------------------------------------------------------------------------
// A CTA per (32 state columns, head, sequence), so a batch-1 step of 32 heads of 128 still fills 128 SMs. The
// column slices are the grid's fastest index, then the heads: CTAs that run together read and write whole
// neighbouring state rows (a head's D x D state, then the next head's) rather than a quarter of each row of many
// heads, which left most of every DRAM page to a later wave. A
// thread owns kVec adjacent columns (one 16-byte access: 4 fp32 or 8 bf16 values) of kRows rows spread
// kRowsPerPass apart, and asks for all of them before it uses any: the CTA's whole state slice (16 KB fp32, 8 KB
// bf16 at d 128) is in flight at once, where a latency-bound batch-1 step needs every byte it can get. Each
// state element is read once, decayed, given k_i v_w, multiplied into the output and written back (16 bytes a
// thread); the output's partial sums over rows meet in a fixed order (shuffles within a warp over the lanes of
// the same columns, then the warps' sums in shared memory), so the result is deterministic.
constexpr int kCols = 32;
constexpr int kDecodeThreads = 256;

// 16 bytes of state as floats, and back (bf16: the low half of each 32-bit word is the lower column).
__device__ __forceinline__ void unpack_state(const uint4& u, float (&f)[4], float) {
  f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void unpack_state(const uint4& u, float (&f)[8], __nv_bfloat16) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) f[2 * i] = __uint_as_float(w[i] << 16), f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
}
__device__ __forceinline__ uint4 pack_state(const float (&f)[4], float) {
  return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
}
__device__ __forceinline__ uint4 pack_state(const float (&f)[8], __nv_bfloat16) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i]))) |
           uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i + 1]))) << 16;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <int D, typename StateT>
__global__ void __launch_bounds__(kDecodeThreads) lightning_decode_kernel(const LightningArgs a) {
  constexpr int kVec = 16 / int(sizeof(StateT));               // columns a thread owns: 4 or 8
  constexpr int kLanesPerRow = kCols / kVec;                   // threads across the CTA's 32 columns: 8 or 4
  constexpr int kRowsPerPass = kDecodeThreads / kLanesPerRow;  // rows the CTA covers with one access each
  constexpr int kRows = D / kRowsPerPass;                      // rows a thread owns: 1 to 4
  constexpr int kWarps = kDecodeThreads / 32;
  static_assert(kRows >= 1 && D % kRowsPerPass == 0 && 32 % kLanesPerRow == 0, "decode tiling");
  __shared__ float part[kWarps][kCols];
  // Dependents wait for this kernel's completion before they read anything it writes (kernels/launch.cuh).
  pdl_launch_dependents();
  const int s = blockIdx.z, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int cl = tid % kLanesPerRow, r0 = tid / kLanesPerRow;  // this thread: columns cl * kVec + [0, kVec), rows
  const int c0 = blockIdx.x * kCols + cl * kVec;              //   r0 + p * kRowsPerPass, p < kRows
  // The step's layout (q_offsets, start_pos, seq_slots: copied from the host before the step, like the positions
  // lightning_qk reads before its wait) and the decays (uploaded once) come from no kernel: read before the wait.
  const int t0 = a.q_offsets[s];
  // Prefill sequences take the chunked kernel (uniform over the CTA). Their CTAs still wait before they exit: a
  // step of prefills alone would otherwise end this whole grid without a wait, and the chunked kernel's wait,
  // which covers only this grid, would no longer cover lightning_qk's writes to q and k (kernels/launch.cuh).
  if (a.q_offsets[s + 1] - t0 != 1) {
    pdl_wait();
    return;
  }
  const bool reset = a.start_pos[s] == 0;
  const int slot = a.seq_slots[s];
  const float decay = expf(a.log_decay[h]);
  pdl_wait();  // the state (written by this layer's kernels of earlier steps) and q, k, v (by lightning_qk) after it
  // c0 is a multiple of kVec and rows are D elements apart: every access is 16-byte aligned (the state is).
  StateT* S = static_cast<StateT*>(a.state) + (int64_t(slot) * a.heads + h) * D * D + c0;
  uint4 raw[kRows];
#pragma unroll
  for (int p = 0; p < kRows; ++p)  // zero bits are 0.0 in both dtypes: a reset starts from the zero state
    raw[p] = reset ? make_uint4(0u, 0u, 0u, 0u)
                   : *reinterpret_cast<const uint4*>(S + int64_t(r0 + p * kRowsPerPass) * D);
  // q, k and v (1% of the bytes) one bf16 at a time: qkv rows need not be aligned.
  const int kvh = h / (a.heads / a.kv_heads);
  const __nv_bfloat16* row = static_cast<const __nv_bfloat16*>(a.qkv) + int64_t(t0) * a.row_stride;
  const __nv_bfloat16* q = row + int64_t(h) * D;
  const __nv_bfloat16* k = row + int64_t(a.heads + kvh) * D;
  const __nv_bfloat16* v = row + int64_t(a.heads + a.kv_heads + kvh) * D + c0;
  float qv[kRows], kv[kRows], vv[kVec];
#pragma unroll
  for (int p = 0; p < kRows; ++p) {
    qv[p] = __bfloat162float(q[r0 + p * kRowsPerPass]);
    kv[p] = __bfloat162float(k[r0 + p * kRowsPerPass]);
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) vv[j] = __bfloat162float(v[j]);
  float acc[kVec] = {};
#pragma unroll
  for (int p = 0; p < kRows; ++p) {
    float sn[kVec];
    unpack_state(raw[p], sn, StateT{});
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      sn[j] = decay * sn[j] + kv[p] * vv[j];
      acc[j] += qv[p] * sn[j];  // the fp32 state, before a bf16 store rounds it
    }
    // (__stwb: one 16-byte store; a plain uint4 assignment was split into four 4-byte stores.)
    __stwb(reinterpret_cast<uint4*>(S + int64_t(r0 + p * kRowsPerPass) * D), pack_state(sn, StateT{}));
  }
  // Lanes kLanesPerRow apart hold the same columns: sum them, then lanes [0, kLanesPerRow) hold the warp's sums.
#pragma unroll
  for (int j = 0; j < kVec; ++j)
#pragma unroll
    for (int o = kLanesPerRow; o < 32; o <<= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
  if (lane < kLanesPerRow)
#pragma unroll
    for (int j = 0; j < kVec; ++j) part[warp][lane * kVec + j] = acc[j];
  __syncthreads();
  if (tid < kCols) {
    float o = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += part[w][tid];
    a.out[int64_t(t0) * a.heads * D + int64_t(h) * D + blockIdx.x * kCols + tid] = a.scale * o;
  }
}

// ---- prefill: the chunked form ----------------------------------------------------------------------------
// A CTA per (sequence, head, 32 state columns) walks the sequence's chunks in order, its state slice S
// [d_k][32] in shared memory (fp32; rounded to bf16 after every chunk with a bf16 state). A chunk of C tokens
// is taken in tiles of 64 rows: per query tile, o = exp((i + 1) g) q_i S (S as before the chunk) plus, per key
// tile at or before it, A = (Q K^T) * exp((i - j) g) masked to j <= i, o += A V; then S = exp(C g) S +
// sum_j exp((C - 1 - j) g) k_j^T v_j. FLOPs a chunk and CTA: 2 C^2 d (Q K^T, repeated by each of the d/32
// column CTAs) + 2 C d 32 (Q S) + C^2 32 (A V, causal) + 2 C d 32 (state).
// A 60k-token prefill of 32 heads of d 128 runs 128 CTAs, one an SM.
constexpr int kTile = 64;
constexpr int kChunkThreads = 256;
constexpr int kMaxChunk = 256;

template <int D>
constexpr size_t chunk_smem_floats() {
  return size_t(D) * kCols             // S
         + 2 * size_t(kTile) * (D + 1)  // Q, K tiles (padded rows: K read down a column)
         + size_t(kTile) * kCols        // V tile
         + size_t(kTile) * (kTile + 1)  // A tile
         + kMaxChunk + 1;               // exp(m g)
}

template <int D, typename StateT>
__global__ void __launch_bounds__(kChunkThreads) lightning_chunk_kernel(const LightningArgs a) {
  extern __shared__ float sm[];
  float* sS = sm;                               // [D][kCols]
  float* sQ = sS + D * kCols;                   // [kTile][D + 1]
  float* sK = sQ + kTile * (D + 1);             // [kTile][D + 1]
  float* sV = sK + kTile * (D + 1);             // [kTile][kCols]
  float* sA = sV + kTile * kCols;               // [kTile][kTile + 1]
  float* pw = sA + kTile * (kTile + 1);         // [chunk + 1]
  const int s = blockIdx.x, h = blockIdx.y, c0 = blockIdx.z * kCols;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  constexpr int kWarps = kChunkThreads / 32;
  pdl_wait();
  const int t0 = a.q_offsets[s], n = a.q_offsets[s + 1] - t0;
  if (n < 2) return;  // one-token sequences take the decode kernel
  const int kvh = h / (a.heads / a.kv_heads);
  const float g = a.log_decay[h];
  for (int m = tid; m <= a.chunk; m += kChunkThreads) pw[m] = expf(g * float(m));
  StateT* S = static_cast<StateT*>(a.state) + (int64_t(a.seq_slots[s]) * a.heads + h) * D * D + c0;
  const bool reset = a.start_pos[s] == 0;
  for (int idx = tid; idx < D * kCols; idx += kChunkThreads) {
    const int r = idx / kCols, c = idx % kCols;
    sS[idx] = reset ? 0.f : load_state(S + int64_t(r) * D + c);
  }
  const __nv_bfloat16* qkv = static_cast<const __nv_bfloat16*>(a.qkv);
  const int64_t q_col = int64_t(h) * D, k_col = int64_t(a.heads + kvh) * D,
                v_col = int64_t(a.heads + a.kv_heads + kvh) * D + c0;
  // Rows [r0, r0 + rows) of the sequence into a [kTile][D + 1] tile, zeros past `rows`.
  auto load_rows = [&](float* dst, int64_t col, int r0, int rows) {
    for (int idx = tid; idx < kTile * D; idx += kChunkThreads) {
      const int r = idx / D, c = idx % D;
      dst[r * (D + 1) + c] =
          r < rows ? __bfloat162float(qkv[int64_t(t0 + r0 + r) * a.row_stride + col + c]) : 0.f;
    }
  };
  auto load_v = [&](int r0, int rows) {
    for (int idx = tid; idx < kTile * kCols; idx += kChunkThreads) {
      const int r = idx / kCols, c = idx % kCols;
      sV[idx] = r < rows ? __bfloat162float(qkv[int64_t(t0 + r0 + r) * a.row_stride + v_col + c]) : 0.f;
    }
  };
  float* out = a.out + int64_t(t0) * a.heads * D + q_col + c0 + lane;
  const int64_t out_stride = int64_t(a.heads) * D;
  constexpr int kRowsPerWarp = kTile / kWarps;  // output rows of a query tile per warp
  constexpr int kStateRows = D / kWarps;        // state rows per warp
  const int ty = tid / 16, tx = tid % 16;       // A tile: rows ty + 16 a, columns tx + 16 b

  for (int cs = 0; cs < n; cs += a.chunk) {
    const int C = min(a.chunk, n - cs);
    __syncthreads();  // pw and the state (first chunk), or the previous chunk's state update, are visible
    for (int qt = 0; qt < C; qt += kTile) {
      const int qn = min(kTile, C - qt);
      load_rows(sQ, q_col, cs + qt, qn);
      __syncthreads();
      float o[kRowsPerWarp];
#pragma unroll
      for (int m = 0; m < kRowsPerWarp; ++m) {
        const int r = warp + kWarps * m;
        float acc = 0;
#pragma unroll 8
        for (int c = 0; c < D; ++c) acc += sQ[r * (D + 1) + c] * sS[c * kCols + lane];
        o[m] = pw[min(qt + r + 1, a.chunk)] * acc;
      }
      for (int kt = 0; kt <= qt; kt += kTile) {
        const int kn = min(kTile, C - kt);
        __syncthreads();  // the previous key tile's readers are done
        load_rows(sK, k_col, cs + kt, kn);
        load_v(cs + kt, kn);
        __syncthreads();
        float acc[4][4] = {};
#pragma unroll 4
        for (int c = 0; c < D; ++c) {
          float qa[4], kb[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) qa[i] = sQ[(ty + 16 * i) * (D + 1) + c], kb[i] = sK[(tx + 16 * i) * (D + 1) + c];
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] += qa[i] * kb[j];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int qi = qt + ty + 16 * i, kj = kt + tx + 16 * j;
            sA[(ty + 16 * i) * (kTile + 1) + tx + 16 * j] = kj <= qi && qi < C && kj < C ? pw[qi - kj] * acc[i][j] : 0.f;
          }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < kRowsPerWarp; ++m) {
          const int r = warp + kWarps * m;
          float acc2 = 0;
          for (int c = 0; c < kn; ++c) acc2 += sA[r * (kTile + 1) + c] * sV[c * kCols + lane];
          o[m] += acc2;
        }
      }
#pragma unroll
      for (int m = 0; m < kRowsPerWarp; ++m) {
        const int r = warp + kWarps * m;
        if (r < qn) out[int64_t(cs + qt + r) * out_stride] = a.scale * o[m];
      }
      __syncthreads();  // sQ is free for the next query tile
    }
    // State update: thread (warp, lane) owns rows warp + 8 m' of column lane.
    float sn[kStateRows];
#pragma unroll
    for (int m = 0; m < kStateRows; ++m) sn[m] = pw[C] * sS[(warp + kWarps * m) * kCols + lane];
    for (int kt = 0; kt < C; kt += kTile) {
      const int kn = min(kTile, C - kt);
      __syncthreads();
      load_rows(sK, k_col, cs + kt, kn);
      load_v(cs + kt, kn);
      __syncthreads();
      for (int c = 0; c < kn; ++c) {
        const float wv = pw[C - 1 - (kt + c)] * sV[c * kCols + lane];
#pragma unroll
        for (int m = 0; m < kStateRows; ++m) sn[m] += sK[c * (D + 1) + warp + kWarps * m] * wv;
      }
    }
    __syncthreads();  // every reader of the old state (the query tiles) is done
#pragma unroll
    for (int m = 0; m < kStateRows; ++m) sS[(warp + kWarps * m) * kCols + lane] = stored_value(StateT{}, sn[m]);
  }
  __syncthreads();
  for (int idx = tid; idx < D * kCols; idx += kChunkThreads) {
    const int r = idx / kCols, c = idx % kCols;
    store_state(S + int64_t(r) * D + c, sS[idx]);
  }
}

// ---- prefill: the chunked form on tensor cores -------------------------------------------------------------
// The same CTA decomposition and math as lightning_chunk_kernel, its GEMMs on mma.sync m16n8k16 (bf16 x bf16 ->
// fp32). q, k and v are bf16, so Q K^T is exact products summed in fp32, as on CUDA cores. The fp32 operands
// (the state S in Q S, the decayed scores A in A V, the decay-weighted values in K^T (w v)) are split into
// x = hi + lo, both bf16 (lo = bf16(x - hi)), and multiplied twice: what is lost is below 2^-16 of x, under the
// fp32 sums' own error at these lengths. Registers hold the state: warp w owns rows 16 (w % (D/16)) .. + 15 of
// the CTA's 32 columns (all 4 column tiles at d 128, 2 of them at d 64) in the mma accumulator layout, and
// publishes it as transposed bf16 hi / lo tiles in shared memory after each chunk, from which every warp reads
// Q S's B fragments. Per chunk (tokens padded to 16, zeros past the sequence): K rows and V rows arrive in
// shared memory by cp.async, issued one chunk ahead into the other of two buffers (so a chunk's loads overlap
// the previous chunk's math), and V is transposed to V^T there; warp w takes the 16-row query blocks w and (at
// chunks of more than 8 blocks) nb - 1 - w, so that a short causal row and a long one share a warp:
// o = exp((i + 1) g) q_i S + sum over key blocks at or before it of (Q K^T * decay, masked) V, the scores
// staying in registers (their accumulator layout is the A operand's); then each warp its state tiles:
// S = exp(C g) S + K^T (w v), w_j = exp((C - 1 - j) g).
// Fragment layouts (g = lane / 4, t = lane % 4): A 16x16 row-major {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..),
// (g+8, 2t+8..)}; B 16x8 {(k 2t..2t+1, n g), (k 2t+8.., n g)}; C 16x8 {(g, 2t..2t+1), (g+8, 2t..2t+1)}.
constexpr int kMmaThreads = 256;
constexpr int kMmaWarps = kMmaThreads / 32;
constexpr int kVtStride = kMaxChunk + 8;  // V^T rows, bf16: 132 words, a row of 8 lanes 4 banks apart

template <int D>
constexpr size_t mma_smem_bytes() {
  return 2 * (2 * size_t(kMaxChunk) * (D + 8)    // K [2][chunk][D + 8]
              + 2 * size_t(kMaxChunk) * kCols    // V [2][chunk][32]
              + size_t(kCols) * kVtStride        // V^T [32][chunk + 8]
              + 2 * size_t(kCols) * (D + 8))     // S^T hi, lo [32][D + 8]
         + 4 * size_t(kMaxChunk + 1);            // exp(m g)
}
static_assert(mma_smem_bytes<128>() <= 227 * 1024, "the tensor-core prefill's shared memory exceeds the sm_90 limit");

// 16-byte global -> shared copy that bypasses registers.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most one of this thread's committed groups is still in flight.
__device__ __forceinline__ void cp_async_wait_all_but_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }

// (x0, x1) -> bf16 pairs hi and lo with x = hi + lo to 2^-16 of x; x0 in the low half, as an operand wants it.
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t* hi, uint32_t* lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 hf = __bfloat1622float2(h);
  *hi = bf16x2_bits(h);
  *lo = bf16x2_bits(__floats2bfloat162_rn(x0 - hf.x, x1 - hf.y));
}

__device__ __forceinline__ uint32_t ld_u32(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return uint32_t(__bfloat16_as_ushort(lo)) | (uint32_t(__bfloat16_as_ushort(hi)) << 16);
}

template <int D, typename StateT>
__global__ void __launch_bounds__(kMmaThreads, 1) lightning_chunk_mma_kernel(const LightningArgs a) {
  constexpr int kKStride = D + 8, kStStride = D + 8;  // bf16; 4 banks between rows g and g + 1
  constexpr int kMB = D / 16;                         // 16-row state blocks
  constexpr int kNT = kCols / 8 * kMB / kMmaWarps;    // column tiles of 8 per warp: 4 at d 128, 2 at d 64
  constexpr int kKS = D / 16;                         // k steps over head_dim
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* sKbuf = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [2][kMaxChunk][kKStride]
  __nv_bfloat16* sVbuf = sKbuf + 2 * kMaxChunk * kKStride;              // [2][kMaxChunk][kCols]
  __nv_bfloat16* sVt = sVbuf + 2 * kMaxChunk * kCols;                   // [kCols][kVtStride]
  __nv_bfloat16* sShi = sVt + kCols * kVtStride;                      // [kCols][kStStride]: S^T, hi
  __nv_bfloat16* sSlo = sShi + kCols * kStStride;                     // lo
  float* pw = reinterpret_cast<float*>(sSlo + kCols * kStStride);     // [chunk + 1]
  const int s = blockIdx.x, h = blockIdx.y, c0 = blockIdx.z * kCols;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  pdl_wait();
  const int t0 = a.q_offsets[s], n = a.q_offsets[s + 1] - t0;
  if (n < 2) return;  // one-token sequences take the decode kernel
  const int kvh = h / (a.heads / a.kv_heads);
  const float lg = a.log_decay[h];
  for (int m = tid; m <= a.chunk; m += kMmaThreads) pw[m] = expf(lg * float(m));
  StateT* S = static_cast<StateT*>(a.state) + (int64_t(a.seq_slots[s]) * a.heads + h) * D * D + c0;
  const bool reset = a.start_pos[s] == 0;

  // This warp's state tiles: rows mb * 16 + g (+ 8), columns (nt0 + j) * 8 + 2t (+ 1).
  const int mb = warp % kMB, nt0 = (warp / kMB) * kNT;
  float st[kNT][4];
#pragma unroll
  for (int j = 0; j < kNT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = mb * 16 + g + (e >= 2 ? 8 : 0), c = (nt0 + j) * 8 + 2 * t + (e & 1);
      st[j][e] = reset ? 0.f : load_state(S + int64_t(r) * D + c);
    }
  auto publish_state = [&] {
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = mb * 16 + g + (e >= 2 ? 8 : 0), c = (nt0 + j) * 8 + 2 * t + (e & 1);
        const __nv_bfloat16 hi = __float2bfloat16_rn(st[j][e]);
        sShi[c * kStStride + r] = hi;
        sSlo[c * kStStride + r] = __float2bfloat16_rn(st[j][e] - __bfloat162float(hi));
      }
  };
  publish_state();

  const __nv_bfloat16* qkv = static_cast<const __nv_bfloat16*>(a.qkv);
  const int64_t q_col = int64_t(h) * D, k_col = int64_t(a.heads + kvh) * D,
                v_col = int64_t(a.heads + a.kv_heads + kvh) * D + c0;
  float* out = a.out + int64_t(t0) * a.heads * D + q_col + c0;
  const int64_t out_stride = int64_t(a.heads) * D;

  // Chunk [cs, cs + C)'s K and V rows into buffer b: cp.async for the sequence's rows, zeros up to 16 nb rows.
  auto issue_chunk = [&](int cs, int b) {
    const int C = min(a.chunk, n - cs), rows = (C + 15) / 16 * 16;
    __nv_bfloat16* dK = sKbuf + b * kMaxChunk * kKStride;
    __nv_bfloat16* dV = sVbuf + b * kMaxChunk * kCols;
    for (int idx = tid; idx < rows * (D / 8); idx += kMmaThreads) {
      const int r = idx / (D / 8), v = idx % (D / 8);
      if (r < C) cp_async16(dK + r * kKStride + v * 8, qkv + int64_t(t0 + cs + r) * a.row_stride + k_col + v * 8);
      else *reinterpret_cast<uint4*>(dK + r * kKStride + v * 8) = make_uint4(0, 0, 0, 0);
    }
    for (int idx = tid; idx < rows * (kCols / 8); idx += kMmaThreads) {
      const int r = idx / (kCols / 8), v = idx % (kCols / 8);
      if (r < C) cp_async16(dV + r * kCols + v * 8, qkv + int64_t(t0 + cs + r) * a.row_stride + v_col + v * 8);
      else *reinterpret_cast<uint4*>(dV + r * kCols + v * 8) = make_uint4(0, 0, 0, 0);
    }
  };
  issue_chunk(0, 0);
  cp_async_commit();

  for (int cs = 0, it = 0; cs < n; cs += a.chunk, ++it) {
    const int C = min(a.chunk, n - cs), nb = (C + 15) / 16;
    const __nv_bfloat16* sK = sKbuf + (it & 1) * kMaxChunk * kKStride;
    const __nv_bfloat16* sV = sVbuf + (it & 1) * kMaxChunk * kCols;
    __syncthreads();  // the previous chunk's readers of its buffers and V^T are done; pw and S^T are visible
    if (cs + a.chunk < n) issue_chunk(cs + a.chunk, (it + 1) & 1);
    cp_async_commit();  // (possibly empty: the wait below then still leaves only the next chunk in flight)
    cp_async_wait_all_but_one();
    __syncthreads();  // every thread's copies of this chunk have landed
    for (int idx = tid; idx < nb * 16 * kCols; idx += kMmaThreads) {
      const int r = idx / kCols, c = idx % kCols;
      sVt[c * kVtStride + r] = sV[idx];
    }
    __syncthreads();

    // Outputs: query block qb of this chunk, 16 rows.
    for (int i = warp; i < nb; i += kMmaWarps) {
      const int qb = i < kMmaWarps ? i : nb - 1 - (i - kMmaWarps);
      const int r0 = qb * 16 + g, r1 = r0 + 8;  // rows of this lane, in the chunk
      const __nv_bfloat16* q0 = qkv + int64_t(t0 + cs + r0) * a.row_stride + q_col + 2 * t;
      const __nv_bfloat16* q1 = qkv + int64_t(t0 + cs + r1) * a.row_stride + q_col + 2 * t;
      uint32_t qf[kKS][4];
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        qf[ks][0] = r0 < C ? ld_u32(q0 + ks * 16) : 0u;
        qf[ks][1] = r1 < C ? ld_u32(q1 + ks * 16) : 0u;
        qf[ks][2] = r0 < C ? ld_u32(q0 + ks * 16 + 8) : 0u;
        qf[ks][3] = r1 < C ? ld_u32(q1 + ks * 16 + 8) : 0u;
      }
      float o[kCols / 8][4] = {}, o_lo[kCols / 8][4] = {};
      // Inter-chunk: Q S (S as before the chunk), S in hi + lo (their products in separate chains).
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks)
#pragma unroll
        for (int nt = 0; nt < kCols / 8; ++nt) {
          const int off = (nt * 8 + g) * kStStride + ks * 16 + 2 * t;
          mma_bf16(o[nt], qf[ks], ld_u32(sShi + off), ld_u32(sShi + off + 8));
          mma_bf16(o_lo[nt], qf[ks], ld_u32(sSlo + off), ld_u32(sSlo + off + 8));
        }
      const float w0 = pw[r0 + 1], w1 = pw[r1 + 1];  // r1 + 1 <= 16 nb <= chunk
#pragma unroll
      for (int nt = 0; nt < kCols / 8; ++nt) {
        o[nt][0] = w0 * (o[nt][0] + o_lo[nt][0]), o[nt][1] = w0 * (o[nt][1] + o_lo[nt][1]);
        o[nt][2] = w1 * (o[nt][2] + o_lo[nt][2]), o[nt][3] = w1 * (o[nt][3] + o_lo[nt][3]);
      }
      // Intra-chunk: per key block kb <= qb, P = Q K^T (two 8-key halves), decayed and masked, then P V.
      for (int kb = 0; kb <= qb; ++kb) {
        // Even and odd k steps into separate accumulators: four independent mma chains, not two.
        float p2[2][2][4] = {};
#pragma unroll
        for (int ks = 0; ks < kKS; ++ks)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const __nv_bfloat16* kr = sK + (kb * 16 + hf * 8 + g) * kKStride + ks * 16 + 2 * t;
            mma_bf16(p2[hf][ks % 2], qf[ks], ld_u32(kr), ld_u32(kr + 8));
          }
        float p[2][4];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
#pragma unroll
          for (int e = 0; e < 4; ++e) p[hf][e] = p2[hf][0][e] + p2[hf][1][e];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int qi = e >= 2 ? r1 : r0, kj = kb * 16 + hf * 8 + 2 * t + (e & 1);
            p[hf][e] = kj <= qi ? pw[qi - kj] * p[hf][e] : 0.f;
          }
        uint32_t ahi[4], alo[4];
        split_bf16x2(p[0][0], p[0][1], &ahi[0], &alo[0]);
        split_bf16x2(p[0][2], p[0][3], &ahi[1], &alo[1]);
        split_bf16x2(p[1][0], p[1][1], &ahi[2], &alo[2]);
        split_bf16x2(p[1][2], p[1][3], &ahi[3], &alo[3]);
#pragma unroll
        for (int nt = 0; nt < kCols / 8; ++nt) {
          const __nv_bfloat16* vr = sVt + (nt * 8 + g) * kVtStride + kb * 16 + 2 * t;
          const uint32_t b0 = ld_u32(vr), b1 = ld_u32(vr + 8);
          mma_bf16(o[nt], ahi, b0, b1);
          mma_bf16(o[nt], alo, b0, b1);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kCols / 8; ++nt) {
        const int c = nt * 8 + 2 * t;
        if (r0 < C)
          *reinterpret_cast<float2*>(out + int64_t(cs + r0) * out_stride + c) =
              make_float2(a.scale * o[nt][0], a.scale * o[nt][1]);
        if (r1 < C)
          *reinterpret_cast<float2*>(out + int64_t(cs + r1) * out_stride + c) =
              make_float2(a.scale * o[nt][2], a.scale * o[nt][3]);
      }
    }

    // State: S = exp(C g) S + K^T (w v), K^T's fragments gathered from K's rows, w v split into hi + lo.
    const float wc = pw[C];
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[j][e] *= wc;
    float st_lo[kNT][4] = {};  // the lo products' own chains
    for (int ks = 0; ks < nb; ++ks) {
      const int j0 = ks * 16 + 2 * t;  // keys j0, j0 + 1, j0 + 8, j0 + 9
      const __nv_bfloat16* kc = sK + j0 * kKStride + mb * 16 + g;
      uint32_t af[4];
      af[0] = pack_bf16(kc[0], kc[kKStride]);
      af[1] = pack_bf16(kc[8], kc[kKStride + 8]);
      af[2] = pack_bf16(kc[8 * kKStride], kc[9 * kKStride]);
      af[3] = pack_bf16(kc[8 * kKStride + 8], kc[9 * kKStride + 8]);
      float w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + (e & 1) + (e >= 2 ? 8 : 0);
        w[e] = j < C ? pw[C - 1 - j] : 0.f;
      }
#pragma unroll
      for (int jt = 0; jt < kNT; ++jt) {
        const __nv_bfloat16* vr = sVt + ((nt0 + jt) * 8 + g) * kVtStride + j0;
        const float2 v01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vr));
        const float2 v89 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vr + 8));
        uint32_t bhi[2], blo[2];
        split_bf16x2(w[0] * v01.x, w[1] * v01.y, &bhi[0], &blo[0]);
        split_bf16x2(w[2] * v89.x, w[3] * v89.y, &bhi[1], &blo[1]);
        mma_bf16(st[jt], af, bhi[0], bhi[1]);
        mma_bf16(st_lo[jt], af, blo[0], blo[1]);
      }
    }
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[j][e] = stored_value(StateT{}, st[j][e] + st_lo[j][e]);
    __syncthreads();  // every warp's Q S read of the old S^T is done
    publish_state();
  }
#pragma unroll
  for (int j = 0; j < kNT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = mb * 16 + g + (e >= 2 ? 8 : 0), c = (nt0 + j) * 8 + 2 * t + (e & 1);
      store_state(S + int64_t(r) * D + c, st[j][e]);
    }
}

template <int D, typename StateT>
cudaError_t launch_chunk(const LightningArgs& a, cudaStream_t stream) {
  const size_t smem = chunk_smem_floats<D>() * sizeof(float);
  static const cudaError_t attr =
      cudaFuncSetAttribute(lightning_chunk_kernel<D, StateT>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (attr != cudaSuccess) return attr;
  return launch(lightning_chunk_kernel<D, StateT>, dim3(a.batch, a.heads, D / kCols), kChunkThreads, smem, stream,
                a);
}

template <int D, typename StateT>
cudaError_t launch_chunk_mma(const LightningArgs& a, cudaStream_t stream) {
  constexpr size_t smem = mma_smem_bytes<D>();
  static const cudaError_t attr = cudaFuncSetAttribute(lightning_chunk_mma_kernel<D, StateT>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (attr != cudaSuccess) return attr;
  return launch(lightning_chunk_mma_kernel<D, StateT>, dim3(a.batch, a.heads, D / kCols), kMmaThreads, smem,
                stream, a);
}

// The tensor-core form reads K and V rows 16 bytes at a time.
bool mma_form_fits(const LightningArgs& a) {
  return reinterpret_cast<uintptr_t>(a.qkv) % 16 == 0 && a.row_stride % 8 == 0;
}

template <typename StateT>
cudaError_t run_typed(const LightningArgs& a, cudaStream_t stream) {
  const dim3 grid(a.head_dim / kCols, a.heads, a.batch);
  cudaError_t e = a.head_dim == 64 ? launch(lightning_decode_kernel<64, StateT>, grid, kDecodeThreads, 0, stream, a)
                                   : launch(lightning_decode_kernel<128, StateT>, grid, kDecodeThreads, 0, stream, a);
  if (e != cudaSuccess || a.max_tokens <= 1) return e;
  const bool mma = a.prefill_form == LightningPrefillForm::kTensorCores ||
                   (a.prefill_form == LightningPrefillForm::kAuto && mma_form_fits(a));
  if (mma) return a.head_dim == 64 ? launch_chunk_mma<64, StateT>(a, stream) : launch_chunk_mma<128, StateT>(a, stream);
  return a.head_dim == 64 ? launch_chunk<64, StateT>(a, stream) : launch_chunk<128, StateT>(a, stream);
}

// ---- output norm + gate -----------------------------------------------------------------------------------
// A CTA per row, sized so that a row of up to kGatePer * 512 = 4096 columns lives in registers: threads = width
// / kGatePer rounded up to whole warps (at most 512), thread tid holding columns tid + k * threads (each warp's
// access is one contiguous run: coalesced for any width and any alignment). Every thread asks for its attn, gate
// and gamma values at once, so a decode step's rows cost one round of loads, one block reduction and the stores
// (a loop of 256 threads over 4096 columns took 16 dependent rounds a pass). Columns past kGatePer * threads
// (rows wider than 4096) are read in strided loops, twice. 512 threads of 40-44 registers: 2-3 CTAs an SM, rows
// overlapping one another in a prefill (1024 threads would need <= 32 registers for two, and spill there). The
// attention output's dtype is a template parameter: one address stream, not two.
constexpr int kGatePer = 8;
constexpr int kGateMaxThreads = 512;

int output_gate_threads(int width) {
  const int warps = ((width + kGatePer - 1) / kGatePer + 31) / 32;
  return 32 * std::min(std::max(warps, 1), kGateMaxThreads / 32);
}

template <bool kBf16Attn>
__global__ void __launch_bounds__(kGateMaxThreads) output_gate_kernel(const OutputGateArgs a) {
  __shared__ float red[kGateMaxThreads / 32];
  pdl_launch_dependents();
  const int t = blockIdx.x, tid = threadIdx.x, nt = blockDim.x, lane = tid % 32, warp = tid / 32;
  const bool norm = a.gamma != nullptr, gated = a.gate != nullptr;
  // gamma is a weight (no kernel writes it): read before the wait, while the previous kernel drains.
  float gm[kGatePer];
#pragma unroll
  for (int k = 0; k < kGatePer; ++k) {
    const int c = tid + k * nt;
    gm[k] = norm && c < a.width ? a.gamma[c] : 1.f;
  }
  pdl_wait();
  const float* xf = static_cast<const float*>(a.attn) + int64_t(t) * a.width;
  const __nv_bfloat16* xb = static_cast<const __nv_bfloat16*>(a.attn) + int64_t(t) * a.width;
  const __nv_bfloat16* gate = static_cast<const __nv_bfloat16*>(a.gate) + int64_t(t) * a.gate_stride;
  auto x = [&](int c) {
    if constexpr (kBf16Attn) return __bfloat162float(xb[c]);
    else return xf[c];
  };
  float xv[kGatePer], gv[kGatePer];
#pragma unroll
  for (int k = 0; k < kGatePer; ++k) {
    const int c = tid + k * nt;
    xv[k] = c < a.width ? x(c) : 0.f;
    gv[k] = gated && c < a.width ? __bfloat162float(gate[c]) : 0.f;
  }
  const int held = kGatePer * nt;  // columns [0, held) are in registers
  float inv = 1.f;
  if (norm) {  // uniform over the CTA: the barrier below is reached by every thread or none
    float ss = 0;
#pragma unroll
    for (int k = 0; k < kGatePer; ++k) ss += xv[k] * xv[k];
    for (int c = held + tid; c < a.width; c += nt) ss += x(c) * x(c);
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    // Every warp adds the warps' sums in the same order: one value for the whole row, no second barrier.
    const float tot = warp_sum(lane < nt / 32 ? red[lane] : 0.f);
    inv = rsqrtf(tot / float(a.width) + a.eps);
  }
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out) + int64_t(t) * a.width;
#pragma unroll
  for (int k = 0; k < kGatePer; ++k) {
    const int c = tid + k * nt;
    if (c >= a.width) break;
    float y = norm ? xv[k] * inv * gm[k] : xv[k];
    if (gated) y *= 1.f / (1.f + __expf(-gv[k]));
    out[c] = __float2bfloat16_rn(y);
  }
  for (int c = held + tid; c < a.width; c += nt) {
    float y = norm ? x(c) * inv * a.gamma[c] : x(c);
    if (gated) y *= 1.f / (1.f + __expf(-__bfloat162float(gate[c])));
    out[c] = __float2bfloat16_rn(y);
  }
}

}  // namespace

std::string lightning_qk_can_implement(const LightningQkArgs& a) {
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.head_dim > 2 * 32 * kQkMaxPairs)
    return "head_dim: must be an even number in 2..256, got " + std::to_string(a.head_dim);
  if (a.heads <= 0 || a.kv_heads <= 0) return "heads / kv_heads: must be positive";
  if (a.tokens < 0) return "tokens: must be >= 0";
  if (a.row_stride < int64_t(a.heads + a.kv_heads) * a.head_dim)
    return "row_stride: must be >= (heads + kv_heads) * head_dim";
  if (!a.qkv || (a.rope && !a.positions)) return "pointers: qkv (and positions with rope) are required";
  return "";
}

std::string lightning_can_implement(const LightningArgs& a) {
  if (a.head_dim != 64 && a.head_dim != 128)
    return "head_dim: must be 64 or 128, got " + std::to_string(a.head_dim);
  if (a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0)
    return "heads / kv_heads: heads must be a positive multiple of kv_heads";
  if (a.chunk < 16 || a.chunk > kMaxChunk || a.chunk % 16 != 0)
    return "chunk: must be a multiple of 16 in 16..256, got " + std::to_string(a.chunk);
  if (a.state_dtype != LightningStateDtype::kFp32 && a.state_dtype != LightningStateDtype::kBf16)
    return "state_dtype: must be fp32 or bf16";
  if (a.batch < 0 || a.max_tokens < 1) return "batch / max_tokens: batch must be >= 0 and max_tokens >= 1";
  if (a.batch > 65535) return "batch: " + std::to_string(a.batch) + " sequences; the decode grid allows 0..65535";
  if (a.slots <= 0) return "slots: must be positive";
  if (a.prefill_form != LightningPrefillForm::kAuto && a.prefill_form != LightningPrefillForm::kTensorCores &&
      a.prefill_form != LightningPrefillForm::kCudaCores)
    return "prefill_form: must be auto, tensor_cores or cuda_cores";
  if (a.prefill_form == LightningPrefillForm::kTensorCores && a.qkv && !mma_form_fits(a))
    return "prefill_form: tensor_cores needs qkv 16-byte aligned and row_stride a multiple of 8, got row_stride " +
           std::to_string(a.row_stride);
  if (a.row_stride < int64_t(a.heads + 2 * a.kv_heads) * a.head_dim)
    return "row_stride: must be >= (heads + 2 kv_heads) * head_dim";
  if (!a.qkv || !a.out || !a.state || !a.q_offsets || !a.start_pos || !a.seq_slots || !a.log_decay)
    return "pointers: qkv, out, state, q_offsets, start_pos, seq_slots and log_decay are required";
  if (reinterpret_cast<uintptr_t>(a.state) % 16 != 0)
    return "state: must be 16-byte aligned (the decode step moves 16 bytes of a state row at a time)";
  return "";
}

std::string output_gate_can_implement(const OutputGateArgs& a) {
  if (a.width <= 0) return "width: must be positive";
  if (a.tokens < 0) return "tokens: must be >= 0";
  if (a.gate && a.gate_stride < a.width) return "gate_stride: must be >= width";
  if (!a.attn || !a.out) return "pointers: attn and out are required";
  return "";
}

std::size_t lightning_workspace_bytes(int, int, int, int, int) { return 0; }

cudaError_t lightning_qk_run(const LightningQkArgs& a, cudaStream_t stream) {
  if (a.tokens == 0) return cudaSuccess;
  const int heads_per_cta = kQkWarps * (a.tokens <= kQkFewTokens ? 1 : 4);
  const dim3 grid(a.tokens, (a.heads + a.kv_heads + heads_per_cta - 1) / heads_per_cta);
  return a.tokens <= kQkFewTokens ? launch(lightning_qk_kernel<1>, grid, kQkWarps * 32, 0, stream, a)
                                  : launch(lightning_qk_kernel<4>, grid, kQkWarps * 32, 0, stream, a);
}

cudaError_t lightning_run(const LightningArgs& a, cudaStream_t stream) {
  if (a.batch == 0) return cudaSuccess;
  return a.state_dtype == LightningStateDtype::kFp32 ? run_typed<float>(a, stream)
                                                     : run_typed<__nv_bfloat16>(a, stream);
}

cudaError_t output_gate_run(const OutputGateArgs& a, cudaStream_t stream) {
  if (a.tokens == 0) return cudaSuccess;
  const int threads = output_gate_threads(a.width);
  return a.attn_bf16 ? launch(output_gate_kernel<true>, dim3(a.tokens), threads, 0, stream, a)
                     : launch(output_gate_kernel<false>, dim3(a.tokens), threads, 0, stream, a);
}

}  // namespace soartune::kernels
