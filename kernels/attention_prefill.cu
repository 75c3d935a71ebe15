#include "kernels/attention_prefill.cuh"

#include <cmath>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/attention_common.cuh"

namespace soartune::kernels {
namespace {

using attn_detail::cp_async16;
using attn_detail::cp_async_commit;
using attn_detail::cp_async_wait;
using attn_detail::dequant16;
using attn_detail::fast_exp2;
using attn_detail::kLog2e;
using attn_detail::kKvBytes;
using attn_detail::kKvVec;
using attn_detail::load16;
using attn_detail::load_act;
using attn_detail::mma16816;
using attn_detail::pack2;
using attn_detail::store_act;
using attn_detail::store_act2;

constexpr int kBlockN = 32;       // KV tokens per tile
constexpr int kRowsPerThread = 4;
constexpr int kColThreads = 8;    // threads sharing a query row; each owns kBlockN / 8 keys, D / 8 dims

struct PrefillParams {
  PrefillAttentionArgs a;
  float q_scale;  // softmax_scale * log2(e)
};

// The (query block, head) a CTA serves. CTAs are dispatched in linear-id order, so the ids map longest
// causal work first across all heads (query blocks descending, heads fastest): the last CTAs to start are the
// shortest, and no long block of a late head is left to run alone at the end of the grid.
struct QueryBlock {
  int block, head;
};
__device__ __forceinline__ QueryBlock query_block() {
  const int lin = blockIdx.y * gridDim.x + blockIdx.x;
  return {int(gridDim.x) - 1 - lin / int(gridDim.y), lin % int(gridDim.y)};
}

__host__ __device__ constexpr int threads_for(int block_m) { return block_m / kRowsPerThread * kColThreads; }
constexpr size_t smem_for(int block_m, int d) { return size_t(block_m + 2 * kBlockN) * (d + 1) * sizeof(float); }

// Thread (tr, tc) owns query rows tr + kRowTh * i (i < 4), keys tc + 8 * j of each tile (j < 4) and output
// dims tc + 8 * k (k < D / 8). Shared memory rows are padded by one float so that the 8 column threads
// and the 4 row groups of a warp fall in different banks.
template <KvCacheDtype KV, int D, int BM>
__global__ void __launch_bounds__(threads_for(BM)) prefill_attention_kernel(PrefillParams p) {
  constexpr int kThreads = threads_for(BM);
  constexpr int kRowTh = BM / kRowsPerThread;
  constexpr int kKeysPerThread = kBlockN / kColThreads;
  constexpr int kDimsPerThread = D / kColThreads;
  constexpr int kStride = D + 1;
  constexpr int kVec = kKvVec<KV>;
  constexpr int kChunksPerRow = D / kVec;
  constexpr int kElemBytes = kKvBytes<KV>;

  extern __shared__ float smem[];
  float* q_s = smem;                        // [BM][kStride]
  float* k_s = q_s + BM * kStride;          // [kBlockN][kStride]
  float* v_s = k_s + kBlockN * kStride;     // [kBlockN][kStride]

  const PrefillAttentionArgs& a = p.a;
  const int b = blockIdx.z;
  const QueryBlock qh = query_block();
  const int h = qh.head;
  const int kv_head = h / (a.n_heads / a.n_kv_heads);
  const int qb = qh.block;
  const int q_begin = a.q_offsets[b];
  const int q_len = a.q_offsets[b + 1] - q_begin;
  const int row0 = qb * BM;
  if (row0 >= q_len) return;
  const int prefix = a.prefix_lens[b];
  const int rows = min(BM, q_len - row0);
  const int kv_end = prefix + row0 + rows;       // one past the last position a row of this block sees
  const int64_t q_stride = a.q_stride ? a.q_stride : int64_t(a.n_heads) * D;
  const int64_t out_stride = a.out_stride ? a.out_stride : int64_t(a.n_heads) * D;
  const int32_t* bt = a.block_table + int64_t(b) * a.block_table_stride;
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);

  const int tid = threadIdx.x;
  const int tr = tid / kColThreads;
  const int tc = tid % kColThreads;
  const int lane = tid % 32;

  for (int i = tid; i < BM * D; i += kThreads) {
    const int r = i / D, d = i % D;
    q_s[r * kStride + d] =
        r < rows ? load_act(a.q, a.act_dtype, (q_begin + row0 + r) * q_stride + int64_t(h) * D + d) * p.q_scale
                 : 0.f;
  }

  int pos[kRowsPerThread];
  float m[kRowsPerThread], l[kRowsPerThread];
  float acc[kRowsPerThread][kDimsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    pos[i] = prefix + row0 + min(tr + kRowTh * i, rows - 1);  // rows past the chunk copy the last one
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int k = 0; k < kDimsPerThread; ++k) acc[i][k] = 0.f;
  }

  for (int t0 = 0; t0 < kv_end; t0 += kBlockN) {
    __syncthreads();  // the previous tile is consumed (and q_s is written, on the first pass)
    for (int c = tid; c < kBlockN * kChunksPerRow; c += kThreads) {
      const int tok = c / kChunksPerRow, part = c % kChunksPerRow;
      const int t = t0 + tok;
      float kf[kVec], vf[kVec];
      if (t < kv_end) {
        const int page = __ldg(bt + t / a.page_size);
        const int64_t off =
            ((int64_t(page) * a.n_kv_heads + kv_head) * a.page_size + t % a.page_size) * D + part * kVec;
        const uint4 kr = load16(kc + off * kElemBytes);
        const uint4 vr = load16(vc + off * kElemBytes);
        dequant16<KV>(kr, a.k_scale, kf);
        dequant16<KV>(vr, a.v_scale, vf);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) kf[e] = vf[e] = 0.f;
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        k_s[tok * kStride + part * kVec + e] = kf[e];
        v_s[tok * kStride + part * kVec + e] = vf[e];
      }
    }
    __syncthreads();

    // S = Q K^T for this thread's 4 x 4 scores.
    float s[kRowsPerThread][kKeysPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) s[i][j] = 0.f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      float qv[kRowsPerThread], kv[kKeysPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) qv[i] = q_s[(tr + kRowTh * i) * kStride + d];
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) kv[j] = k_s[(tc + kColThreads * j) * kStride + d];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j) s[i][j] += qv[i] * kv[j];
    }

    // Causal mask and online softmax; a row's 8 column threads are 8 consecutive lanes.
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      float mt = -INFINITY;
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) {
        if (t0 + tc + kColThreads * j > pos[i]) s[i][j] = -INFINITY;
        mt = fmaxf(mt, s[i][j]);
      }
#pragma unroll
      for (int o = 1; o < kColThreads; o *= 2) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
      const float m_new = fmaxf(m[i], mt);   // finite: token 0 is in the first tile of every row
      const float alpha = exp2f(m[i] - m_new);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) {
        s[i][j] = exp2f(s[i][j] - m_new);
        sum += s[i][j];
      }
#pragma unroll
      for (int o = 1; o < kColThreads; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      m[i] = m_new;
      l[i] = l[i] * alpha + sum;
#pragma unroll
      for (int k = 0; k < kDimsPerThread; ++k) acc[i][k] *= alpha;
    }

    // O += P V; key c's probability lives in lane (lane & ~7) | (c % 8), slot c / 8.
    const int row_lane0 = lane & ~(kColThreads - 1);
#pragma unroll
    for (int c = 0; c < kBlockN; ++c) {
      float pc[kRowsPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
        pc[i] = __shfl_sync(0xffffffffu, s[i][c / kColThreads], row_lane0 | (c % kColThreads));
#pragma unroll
      for (int k = 0; k < kDimsPerThread; ++k) {
        const float v = v_s[c * kStride + tc + kColThreads * k];
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) acc[i][k] += pc[i] * v;
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int r = tr + kRowTh * i;
    if (r >= rows) continue;
    const float inv_l = 1.f / l[i];
    const int64_t base = (q_begin + row0 + r) * out_stride + int64_t(h) * D;
#pragma unroll
    for (int k = 0; k < kDimsPerThread; ++k)
      store_act(a.out, a.act_dtype, base + tc + kColThreads * k, acc[i][k] * inv_l);
  }
}

// ---- Tensor-core variant (mma.sync m16n8k16, fp32 accumulators), head_dim 64 and 128 ----
// Each warp owns 16 query rows; KV tiles of kMmaBlockN tokens. bf16 caches run bf16 MMAs; fp16 and fp8
// caches run fp16 MMAs (fp8 widens to fp16 exactly; k_scale is folded into q and v_scale into the output).
// Operands sit in shared memory rows padded by 16 bytes, so the 8 row addresses of each ldmatrix hit
// different banks. S = Q K^T stays in registers and becomes P's A fragments directly.
// 32 rows a warp (each K and V fragment read from shared memory feeding two MMAs, 4 warps at up to 255
// registers) was built and measured slower on the H200: 0.606 against 0.591 ms for a 4k bf16 layer, fp8
// 0.722 against 0.666 (docs/perf-log run 16).
// K/V tiles are double-buffered: tile i+1 is in flight while tile i is multiplied (16-bit caches: cp.async
// straight into shared memory; fp8 caches: 16-byte loads into registers, widened and stored after the
// tile's MMAs), so one barrier per tile remains and the loads no longer wait on the MMAs.
constexpr int kMmaBlockN = 64;
constexpr int kMmaStages = 2;

__host__ __device__ constexpr int mma_threads_for(int block_m) { return block_m * 2; }  // one warp per 16 rows
constexpr size_t mma_smem_for(int block_m, int d) {
  return size_t(block_m + 2 * kMmaStages * kMmaBlockN) * (d + 8) * 2;
}
// CTAs per SM the register bound aims at: for 16-bit caches two CTAs of BM 128 in 128 registers a thread.
__host__ __device__ constexpr int mma_min_blocks(int block_m, bool wide_kv) { return block_m == 128 && wide_kv ? 2 : 1; }

template <int = 0>  // a template, so a build whose kernels leave it unused does not warn
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <int = 0>
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Stores one 16-byte cache vector into shared memory as MMA elements (16-bit: as is; fp8: widened to fp16).
template <KvCacheDtype KV>
__device__ __forceinline__ void store_kv_smem(uint16_t* dst, const uint4& raw) {
  if constexpr (kKvBytes<KV> == 2) {
    *reinterpret_cast<uint4*>(dst) = raw;
  } else {
    constexpr __nv_fp8_interpretation_t kind = KV == KvCacheDtype::kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] & 0xffffu), kind);
      const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> 16), kind);
      h[2 * i] = uint32_t(lo.x) | (uint32_t(lo.y) << 16);
      h[2 * i + 1] = uint32_t(hi.x) | (uint32_t(hi.y) << 16);
    }
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(h[0], h[1], h[2], h[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
}

template <KvCacheDtype KV, int D, int BM>
__global__ void __launch_bounds__(mma_threads_for(BM), mma_min_blocks(BM, kKvBytes<KV> == 2))
    prefill_attention_mma_kernel(PrefillParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // never launched: the plan picks SIMT when the built code predates mma.sync m16n8k16
#else
  using T = std::conditional_t<KV == KvCacheDtype::kBf16, __nv_bfloat16, __half>;
  constexpr int kThreads = mma_threads_for(BM);
  constexpr int kWarpRows = 16;
  constexpr int kBN = kMmaBlockN;
  constexpr int kStride = D + 8;             // elements per shared-memory row
  constexpr int kVec = kKvVec<KV>;           // cache elements per 16-byte load
  constexpr int kChunksPerRow = D / kVec;
  constexpr int kElemBytes = kKvBytes<KV>;
  constexpr int kKSteps = D / 16;            // k-steps of S = Q K^T
  constexpr int kSBlocks = kBN / 8;          // n-blocks of S
  constexpr int kOBlocks = D / 8;            // n-blocks of O
  constexpr bool kFp8 = kKvBytes<KV> == 1;

  constexpr int kChunks = kBN * kChunksPerRow / kThreads;  // 16-byte K (and V) loads per thread per tile
  static_assert(kBN * kChunksPerRow % kThreads == 0, "tile / thread shape");

  extern __shared__ __align__(16) uint16_t smem16[];
  uint16_t* q_s = smem16;                    // [BM][kStride]
  uint16_t* kv_s = q_s + BM * kStride;       // [kMmaStages][K, V][kBN][kStride]

  const PrefillAttentionArgs& a = p.a;
  const int b = blockIdx.z;
  const QueryBlock qh = query_block();
  const int h = qh.head;
  const int kv_head = h / (a.n_heads / a.n_kv_heads);
  const int qb = qh.block;
  const int q_begin = a.q_offsets[b];
  const int q_len = a.q_offsets[b + 1] - q_begin;
  const int row0 = qb * BM;
  if (row0 >= q_len) return;
  const int prefix = a.prefix_lens[b];
  const int rows = min(BM, q_len - row0);
  const int kv_end = prefix + row0 + rows;
  const int64_t q_stride = a.q_stride ? a.q_stride : int64_t(a.n_heads) * D;
  const int64_t out_stride = a.out_stride ? a.out_stride : int64_t(a.n_heads) * D;
  const int32_t* bt = a.block_table + int64_t(b) * a.block_table_stride;
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;   // fragment row (and row + 8)
  const int t4 = lane % 4;  // fragment column pair

  // Stage st's K tile starts at kv_s + 2 * st * kBN * kStride, its V tile kBN * kStride later.
  uint4 k_pre[kFp8 ? kChunks : 1], v_pre[kFp8 ? kChunks : 1];
  const int n_tiles = (kv_end + kBN - 1) / kBN;
  const attn_detail::PageDiv pd(a.page_size);
  // Starts tile `tile`'s loads into stage st (16-bit) or into k_pre / v_pre (fp8). Tokens past kv_end read
  // as zeros, so masked keys never meet a NaN in V.
  auto issue_tile = [&](int tile, int st) {
    uint16_t* ks = kv_s + 2 * st * kBN * kStride;
    uint16_t* vs = ks + kBN * kStride;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = tid + i * kThreads;
      const int tok = c / kChunksPerRow, part = c % kChunksPerRow;
      const int t = tile * kBN + tok;
      int64_t off = 0;
      if (t < kv_end) {
        const int page = __ldg(bt + pd.page(t));
        off = ((int64_t(page) * a.n_kv_heads + kv_head) * a.page_size + pd.slot(t)) * D + part * kVec;
      }
      if constexpr (!kFp8) {
        const int n = t < kv_end ? 16 : 0;
        cp_async16(&ks[tok * kStride + part * kVec], kc + off * kElemBytes, n);
        cp_async16(&vs[tok * kStride + part * kVec], vc + off * kElemBytes, n);
      } else {
        k_pre[i] = t < kv_end ? load16(kc + off * kElemBytes) : make_uint4(0, 0, 0, 0);
        v_pre[i] = t < kv_end ? load16(vc + off * kElemBytes) : make_uint4(0, 0, 0, 0);
      }
    }
    if constexpr (!kFp8) cp_async_commit();
  };
  // fp8: widens the registers loaded by issue_tile into stage st.
  auto store_tile = [&](int st) {
    if constexpr (kFp8) {
      uint16_t* ks = kv_s + 2 * st * kBN * kStride;
      uint16_t* vs = ks + kBN * kStride;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int c = tid + i * kThreads;
        const int tok = c / kChunksPerRow, part = c % kChunksPerRow;
        store_kv_smem<KV>(&ks[tok * kStride + part * kVec], k_pre[i]);
        store_kv_smem<KV>(&vs[tok * kStride + part * kVec], v_pre[i]);
      }
    }
  };
  issue_tile(0, 0);  // in flight while q is staged

  const float q_scale = p.q_scale * (kFp8 ? a.k_scale : 1.f);
  // 16-bit q in 16-byte loads when its rows are 16-byte aligned; otherwise element by element.
  const bool q_vec = a.act_dtype != ActDtype::kFp32 && reinterpret_cast<uintptr_t>(a.q) % 16 == 0 && q_stride % 8 == 0;
  if (q_vec) {
    for (int i = tid; i < BM * D / 8; i += kThreads) {
      const int r = (8 * i) / D, d = (8 * i) % D;
      uint32_t w[4] = {0u, 0u, 0u, 0u};
      if (r < rows) {
        const int64_t base = (q_begin + row0 + r) * q_stride + int64_t(h) * D + d;
        const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.q) + base);
        const uint32_t in[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float2 f;
          if (a.act_dtype == ActDtype::kBf16) {
            f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&in[e]));
          } else {
            f = __half22float2(*reinterpret_cast<const __half2*>(&in[e]));
          }
          w[e] = pack2<T>(f.x * q_scale, f.y * q_scale);
        }
      }
      *reinterpret_cast<uint4*>(&q_s[r * kStride + d]) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  } else {
    for (int i = tid; i < BM * D / 2; i += kThreads) {
      const int r = (2 * i) / D, d = (2 * i) % D;
      float x0 = 0.f, x1 = 0.f;
      if (r < rows) {
        const int64_t base = (q_begin + row0 + r) * q_stride + int64_t(h) * D + d;
        x0 = load_act(a.q, a.act_dtype, base) * q_scale;
        x1 = load_act(a.q, a.act_dtype, base + 1) * q_scale;
      }
      *reinterpret_cast<uint32_t*>(&q_s[r * kStride + d]) = pack2<T>(x0, x1);
    }
  }
  __syncthreads();
  // q's A fragments are re-read from shared memory every tile (8 ldmatrix against the tile's 64) rather
  // than held in registers: at 16 rows a warp that keeps the kernel at 128 registers, two CTAs per SM.
  const int warp_row0 = warp * kWarpRows;
  const uint16_t* q_row = &q_s[(warp_row0 + lane % 16) * kStride + (lane / 16) * 8];

  // Query positions of this thread's two rows; rows past the chunk copy the last one.
  const int pos_lo = prefix + row0 + min(warp_row0 + g, rows - 1);
  const int pos_hi = prefix + row0 + min(warp_row0 + g + 8, rows - 1);
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
  float o[kOBlocks][4];
#pragma unroll
  for (int nd = 0; nd < kOBlocks; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;

  store_tile(0);
  const int warp_first_pos = prefix + row0 + min(warp_row0, rows - 1);
  const int warp_last_pos = prefix + row0 + min(warp_row0 + kWarpRows - 1, rows - 1);

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int st = tile % kMmaStages;
    const int t0 = tile * kBN;
    if constexpr (!kFp8) cp_async_wait<0>();  // this thread's copies of tile `tile` have landed
    // Tile `tile` is in stage st for every thread, and every warp is done with the other stage.
    __syncthreads();
    if (tile + 1 < n_tiles) issue_tile(tile + 1, (tile + 1) % kMmaStages);
    const uint16_t* k_s = kv_s + 2 * st * kBN * kStride;
    const uint16_t* v_s = k_s + kBN * kStride;
    // Warps whose rows all lie before this tile skip it (their keys here are all masked).
    if (t0 <= warp_last_pos) {
      float s[kSBlocks][4];
#pragma unroll
      for (int j = 0; j < kSBlocks; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t qf[4];
        ldmatrix_x4(qf, q_row + kk * 16);
#pragma unroll
        for (int j = 0; j < kSBlocks; j += 2) {
          uint32_t kb[4];
          ldmatrix_x4(kb, &k_s[(j * 8 + (lane / 16) * 8 + lane % 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8]);
          mma16816<T>(s[j], qf, kb[0], kb[1]);
          mma16816<T>(s[j + 1], qf, kb[2], kb[3]);
        }
      }

      const bool diagonal = t0 + kBN - 1 > warp_first_pos;  // only then can a key of the tile follow a row
      float mt_lo = -INFINITY, mt_hi = -INFINITY;
#pragma unroll
      for (int j = 0; j < kSBlocks; ++j) {
        if (diagonal) {
          const int key = t0 + j * 8 + 2 * t4;
          if (key > pos_lo) s[j][0] = -INFINITY;
          if (key + 1 > pos_lo) s[j][1] = -INFINITY;
          if (key > pos_hi) s[j][2] = -INFINITY;
          if (key + 1 > pos_hi) s[j][3] = -INFINITY;
        }
        mt_lo = fmaxf(mt_lo, fmaxf(s[j][0], s[j][1]));
        mt_hi = fmaxf(mt_hi, fmaxf(s[j][2], s[j][3]));
      }
#pragma unroll
      for (int off = 1; off < 4; off *= 2) {
        mt_lo = fmaxf(mt_lo, __shfl_xor_sync(0xffffffffu, mt_lo, off));
        mt_hi = fmaxf(mt_hi, __shfl_xor_sync(0xffffffffu, mt_hi, off));
      }
      // Every row sees key 0 in tile 0, so a row fully masked in a later tile has a finite m already.
      const float mn_lo = fmaxf(m_lo, mt_lo), mn_hi = fmaxf(m_hi, mt_hi);
      const float al_lo = fast_exp2(m_lo - mn_lo), al_hi = fast_exp2(m_hi - mn_hi);
      m_lo = mn_lo;
      m_hi = mn_hi;
      float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
      for (int j = 0; j < kSBlocks; ++j) {
        s[j][0] = fast_exp2(s[j][0] - mn_lo);
        s[j][1] = fast_exp2(s[j][1] - mn_lo);
        s[j][2] = fast_exp2(s[j][2] - mn_hi);
        s[j][3] = fast_exp2(s[j][3] - mn_hi);
        sum_lo += s[j][0] + s[j][1];
        sum_hi += s[j][2] + s[j][3];
      }
      l_lo = l_lo * al_lo + sum_lo;   // per-thread partial; the quad's partials are summed at the end
      l_hi = l_hi * al_hi + sum_hi;
      // After the first tiles a row's max rarely grows: the warp skips the rescale (alphas all 1) then.
      if (__any_sync(0xffffffffu, al_lo != 1.f || al_hi != 1.f)) {
#pragma unroll
        for (int nd = 0; nd < kOBlocks; ++nd) {
          o[nd][0] *= al_lo;
          o[nd][1] *= al_lo;
          o[nd][2] *= al_hi;
          o[nd][3] *= al_hi;
        }
      }

#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int nd = 0; nd < kOBlocks; nd += 2) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, &v_s[(kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kStride + nd * 8 + (lane / 16) * 8]);
          mma16816<T>(o[nd], pa, vb[0], vb[1]);
          mma16816<T>(o[nd + 1], pa, vb[2], vb[3]);
        }
      }
    }
    if (tile + 1 < n_tiles) store_tile((tile + 1) % kMmaStages);
  }

  const float v_scale = kFp8 ? a.v_scale : 1.f;
#pragma unroll
  for (int off = 1; off < 4; off *= 2) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  const int r_lo = warp_row0 + g, r_hi = r_lo + 8;
  const float inv_lo = v_scale / l_lo, inv_hi = v_scale / l_hi;
#pragma unroll
  for (int nd = 0; nd < kOBlocks; ++nd) {
    const int d = nd * 8 + 2 * t4;
    if (r_lo < rows)
      store_act2(a.out, a.act_dtype, (q_begin + row0 + r_lo) * out_stride + int64_t(h) * D + d, o[nd][0] * inv_lo,
                 o[nd][1] * inv_lo);
    if (r_hi < rows)
      store_act2(a.out, a.act_dtype, (q_begin + row0 + r_hi) * out_stride + int64_t(h) * D + d, o[nd][2] * inv_hi,
                 o[nd][3] * inv_hi);
  }
#endif
}

// Whether the tensor-core kernels can run here (see attn_detail::built_for_sm80).
bool mma_kernels_runnable() {
  static const bool ok = attn_detail::built_for_sm80(prefill_attention_mma_kernel<KvCacheDtype::kBf16, 128, 64>);
  return ok;
}

template <KvCacheDtype KV, int D, int BM>
cudaError_t launch_mma(const PrefillParams& p, const PrefillAttentionPlan& plan, cudaStream_t stream) {
  auto* kernel = prefill_attention_mma_kernel<KV, D, BM>;
  static const cudaError_t attr_err = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(mma_smem_for(BM, D)));
  if (attr_err != cudaSuccess) return attr_err;
  kernel<<<dim3(plan.grid_x, plan.grid_y, plan.grid_z), mma_threads_for(BM), mma_smem_for(BM, D), stream>>>(p);
  return cudaGetLastError();
}

template <KvCacheDtype KV, int D, int BM>
cudaError_t launch_bm(const PrefillParams& p, const PrefillAttentionPlan& plan, cudaStream_t stream) {
  if constexpr (D <= 128) {
    if (plan.tensor_cores) return launch_mma<KV, D, BM>(p, plan, stream);
  }
  auto* kernel = prefill_attention_kernel<KV, D, BM>;
  static const cudaError_t attr_err = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_for(BM, D)));
  if (attr_err != cudaSuccess) return attr_err;
  kernel<<<dim3(plan.grid_x, plan.grid_y, plan.grid_z), threads_for(BM), smem_for(BM, D), stream>>>(p);
  return cudaGetLastError();
}

// Each block of core::kPrefillAttnBlocks is instantiated and dispatched here (no second list).
template <KvCacheDtype KV, int D, size_t... I>
cudaError_t launch_blocks(const PrefillParams& p, const PrefillAttentionPlan& plan, cudaStream_t stream,
                          std::index_sequence<I...>) {
  cudaError_t e = cudaErrorInvalidValue;
  ((plan.block_m == core::kPrefillAttnBlocks[I] ? (e = launch_bm<KV, D, core::kPrefillAttnBlocks[I]>(p, plan, stream), true)
                                                : false) ||
   ...);
  return e;
}

template <KvCacheDtype KV, int D>
cudaError_t launch_d(const PrefillParams& p, const PrefillAttentionPlan& plan, cudaStream_t stream) {
  return launch_blocks<KV, D>(p, plan, stream, std::make_index_sequence<std::size(core::kPrefillAttnBlocks)>{});
}

template <KvCacheDtype KV>
cudaError_t launch_kv(const PrefillParams& p, const PrefillAttentionPlan& plan, cudaStream_t stream) {
  switch (p.a.head_dim) {
    case 64: return launch_d<KV, 64>(p, plan, stream);
    case 128: return launch_d<KV, 128>(p, plan, stream);
    case 256: return launch_d<KV, 256>(p, plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

std::string prefill_attention_can_implement(const PrefillAttentionArgs& a) {
  if (!a.q || !a.out || !a.k_cache || !a.v_cache || !a.block_table || !a.q_offsets || !a.prefix_lens)
    return "q, out, k_cache, v_cache, block_table, q_offsets, prefix_lens: must all be device pointers (one is null)";
  if (a.batch < 1) return "batch: must be >= 1";
  if (a.max_q_len < 1) return "max_q_len: must be >= 1";
  return paged_attention_check(a.n_heads, a.n_kv_heads, a.head_dim, a.page_size, a.block_table_stride, a.kv_dtype,
                               a.act_dtype, a.k_cache, a.v_cache, a.q_stride, a.out_stride);
}

std::string prefill_attention_plan(const PrefillAttentionArgs& a, int block_m, PrefillAttentionPlan* plan,
                                   bool allow_tensor_cores) {
  std::string err = prefill_attention_can_implement(a);
  if (!err.empty()) return err;
  if (!core::prefill_attn_block_allowed(block_m))
    return "prefill_attn_block: " + std::to_string(block_m) + " is not one of " + core::allowed_list(core::kPrefillAttnBlocks);
  PrefillAttentionPlan p;
  p.block_m = block_m;
  p.tensor_cores = allow_tensor_cores && a.head_dim <= 128 && mma_kernels_runnable();
  p.block_n = p.tensor_cores ? kMmaBlockN : kBlockN;
  p.threads = p.tensor_cores ? mma_threads_for(block_m) : threads_for(block_m);
  p.grid_x = (a.max_q_len + block_m - 1) / block_m;
  p.grid_y = a.n_heads;
  p.grid_z = a.batch;
  p.smem_bytes = p.tensor_cores ? mma_smem_for(block_m, a.head_dim) : smem_for(block_m, a.head_dim);
  *plan = p;
  return "";
}

cudaError_t prefill_attention_run(const PrefillAttentionArgs& a, const PrefillAttentionPlan& plan,
                                  cudaStream_t stream) {
  PrefillParams p;
  p.a = a;
  const float scale = a.softmax_scale != 0.f ? a.softmax_scale : 1.f / std::sqrt(float(a.head_dim));
  p.q_scale = scale * kLog2e;
  switch (a.kv_dtype) {
    case KvCacheDtype::kBf16: return launch_kv<KvCacheDtype::kBf16>(p, plan, stream);
    case KvCacheDtype::kFp16: return launch_kv<KvCacheDtype::kFp16>(p, plan, stream);
    case KvCacheDtype::kFp8E4M3: return launch_kv<KvCacheDtype::kFp8E4M3>(p, plan, stream);
    case KvCacheDtype::kFp8E5M2: return launch_kv<KvCacheDtype::kFp8E5M2>(p, plan, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace soartune::kernels
