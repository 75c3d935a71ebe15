#include "kernels/sparse_attention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <type_traits>

#include "kernels/attention_common.cuh"

namespace soartune::kernels {
namespace {

using attn_detail::cp_async16;
using attn_detail::cp_async_commit;
using attn_detail::cp_async_wait;
using attn_detail::fast_exp2;
using attn_detail::kKvBytes;
using attn_detail::kKvVec;
using attn_detail::kLog2e;
using attn_detail::load16;
using attn_detail::load_act;
using attn_detail::mma16816;
using attn_detail::pack2;
using attn_detail::store_act;

constexpr int kCk = 64;            // compressed keys per scores CTA
constexpr int kScoreThreads = 256;
constexpr int kSelectThreads = 256;
constexpr int kTile = 64;          // KV tokens per attend tile
constexpr int kAttnThreads = 128;  // 4 warps, 16 tokens of a tile each
constexpr int kRows = 16;          // query heads per attend CTA (one mma row tile)
constexpr int kMaxSplits = 64;

__device__ __forceinline__ int d_compressed(int keys, const SparseParams& sp) {
  return keys < sp.kernel_size ? 0 : (keys - sp.kernel_size) / sp.kernel_stride + 1;
}
__device__ __forceinline__ bool d_selects(int pos, const SparseParams& sp) {
  return pos + 1 >= sp.dense_len && sp.topk + sp.window_size / sp.block_size < pos / sp.block_size + 1;
}
// Sequence of query token t (binary search of q_offsets), -1 past the last sequence's tokens.
__device__ __forceinline__ int seq_of(const int32_t* q_offsets, int batch, int t) {
  if (t >= q_offsets[batch]) return -1;
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (q_offsets[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// fp8 values times their scale with the product rounded on its own (__fmul_rn): the compression adds them up,
// and nvcc would otherwise fuse product and sum into one FMA, which the twin (a rounded product, then the sum)
// does not do; the compressed keys would then differ in the last bit for any scale that is not a power of two.
__device__ __forceinline__ float kv_value(const void* cache, KvCacheDtype dt, int64_t i, float scale) {
  switch (dt) {
    case KvCacheDtype::kBf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(cache)[i]);
    case KvCacheDtype::kFp16: return __half2float(static_cast<const __half*>(cache)[i]);
    case KvCacheDtype::kFp8E4M3: {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<const __nv_fp8_storage_t*>(cache)[i], __NV_E4M3);
      return __fmul_rn(__half2float(__half(h)), scale);
    }
    default: {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<const __nv_fp8_storage_t*>(cache)[i], __NV_E5M2);
      return __fmul_rn(__half2float(__half(h)), scale);
    }
  }
}

// ---- compressed keys: the windows each sequence's chunk completes, summed in key order then scaled ----
__global__ void compress_kernel(SparseAttentionArgs a) {
  const int b = blockIdx.z, kvh = blockIdx.y, e = threadIdx.x;
  const SparseParams& sp = a.sp;
  const int prefix = a.prefix_lens[b];
  const int end = prefix + a.q_offsets[b + 1] - a.q_offsets[b];
  const int first = d_compressed(prefix, sp), last = min(d_compressed(end, sp), a.ck_capacity);
  const int32_t* bt = a.block_table + int64_t(b) * a.block_table_stride;
  float* ck = a.ck + (int64_t(a.ck_slots[b]) * a.n_kv_heads + kvh) * a.ck_capacity * a.head_dim;
  const float inv = 1.f / static_cast<float>(sp.kernel_size);
  for (int i = first + blockIdx.x; i < last; i += gridDim.x) {
    float c = 0.f;
    for (int j = i * sp.kernel_stride; j < i * sp.kernel_stride + sp.kernel_size; ++j) {
      const int64_t off = ((int64_t(__ldg(bt + j / a.page_size)) * a.n_kv_heads + kvh) * a.page_size + j % a.page_size) *
                              a.head_dim + e;
      c += kv_value(a.k_cache, a.kv_dtype, off, a.k_scale);
    }
    ck[int64_t(i) * a.head_dim + e] = c * inv;
  }
}

// ---- scores: pass 1 per-chunk (max, sum of exp) per query head; pass 2 the group's summed probabilities ----
template <int D, bool kPass2>
__global__ void __launch_bounds__(kScoreThreads) scores_kernel(SparseAttentionArgs a, SparseAttentionPlan p, char* ws) {
  const int t = blockIdx.x, kvh = blockIdx.y, chunk = blockIdx.z;
  const int b = seq_of(a.q_offsets, a.batch, t);
  if (b < 0) return;
  const SparseParams& sp = a.sp;
  const int pos = a.prefix_lens[b] + t - a.q_offsets[b];
  if (!d_selects(pos, sp)) return;
  const int nc = min(d_compressed(pos + 1, sp), a.ck_capacity);
  const int i0 = chunk * kCk;
  if (i0 >= nc) return;
  const int group = a.n_heads / a.n_kv_heads;
  const int n_chunks = (nc + kCk - 1) / kCk;
  // Compressed-key rows padded to D + 4 floats: 16-byte rows for float4 loads, and the 8 lanes of a float4
  // load's phase (keys k .. k + 7) start 4 banks apart, so they hit all 32 banks once.
  constexpr int kCs = D + 4;
  extern __shared__ __align__(16) float sm[];
  float* qs = sm;                      // [group][D]
  float* cs = qs + group * D;          // [kCk][kCs]
  float* ls = cs + kCk * kCs;          // [group][kCk] logits
  float* ms = ls + group * kCk;        // [group][2] pass 2: the head's max and sum over all chunks
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t q_stride = a.q_stride ? a.q_stride : int64_t(a.n_heads) * D;
  for (int i = tid; i < group * D; i += kScoreThreads)
    qs[i] = load_act(a.q, a.act_dtype, int64_t(t) * q_stride + int64_t(kvh) * group * D + i);
  const float* ckb = a.ck + (int64_t(a.ck_slots[b]) * a.n_kv_heads + kvh) * a.ck_capacity * D;
  for (int i = tid; i < kCk * D / 4; i += kScoreThreads) {
    const int r = (4 * i) / D, e = (4 * i) % D;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i0 + r < nc) v = *reinterpret_cast<const float4*>(ckb + int64_t(i0 + r) * D + e);
    *reinterpret_cast<float4*>(cs + r * kCs + e) = v;
  }
  __syncthreads();
  // Thread: key lane + 32 (warp % 2), heads warp / 2 + 4 j, four heads at a time so that one float4 of the key
  // serves four dot products (the query's float4s are broadcasts). Each dot product is one chain of fused
  // multiply-adds in element order, as the twin's loop (and a plain `dot += q * c` loop compiled with
  // contraction), so the logits do not depend on how the heads are grouped.
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  {
    constexpr int kHeadStep = kScoreThreads / kCk;   // 4: threads k, k + 64, ... share a key
    const int k = lane + 32 * (warp % 2);
    const float* c = cs + k * kCs;
    for (int h0 = warp / 2; h0 < group; h0 += 4 * kHeadStep) {
      // Heads h0 + kHeadStep j; those past the group compute a copy of the last head's row and are not stored.
      const float* q4[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) q4[j] = qs + min(h0 + kHeadStep * j, group - 1) * D;
      float dot[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
      for (int e = 0; e < D; e += 4) {
        const float4 cv = *reinterpret_cast<const float4*>(c + e);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float4 qv = *reinterpret_cast<const float4*>(q4[j] + e);
          dot[j] = fmaf(qv.x, cv.x, dot[j]);
          dot[j] = fmaf(qv.y, cv.y, dot[j]);
          dot[j] = fmaf(qv.z, cv.z, dot[j]);
          dot[j] = fmaf(qv.w, cv.w, dot[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (h0 + kHeadStep * j < group) ls[(h0 + kHeadStep * j) * kCk + k] = i0 + k < nc ? dot[j] * scale : -INFINITY;
    }
  }
  __syncthreads();
  float* partial = reinterpret_cast<float*>(ws + p.partial_off) +
                   ((int64_t(t) * a.n_kv_heads + kvh) * p.ck_chunks) * group * 2;
  if constexpr (!kPass2) {
    for (int h = warp; h < group; h += kScoreThreads / 32) {
      const float l0 = ls[h * kCk + lane], l1 = ls[h * kCk + lane + 32];
      float m = fmaxf(l0, l1);
#pragma unroll
      for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
      float s = expf(l0 - m) + expf(l1 - m);
#pragma unroll
      for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) {
        partial[(int64_t(chunk) * group + h) * 2] = m;
        partial[(int64_t(chunk) * group + h) * 2 + 1] = s;
      }
    }
  } else {
    for (int h = tid; h < group; h += kScoreThreads) {
      float m = -INFINITY;
      for (int c = 0; c < n_chunks; ++c) m = fmaxf(m, partial[(int64_t(c) * group + h) * 2]);
      float s = 0.f;
      for (int c = 0; c < n_chunks; ++c)
        s += partial[(int64_t(c) * group + h) * 2 + 1] * expf(partial[(int64_t(c) * group + h) * 2] - m);
      ms[2 * h] = m;
      ms[2 * h + 1] = s;
    }
    __syncthreads();
    if (tid < kCk && i0 + tid < nc) {
      float summed = 0.f;
      for (int h = 0; h < group; ++h) summed += expf(ls[h * kCk + tid] - ms[2 * h]) / ms[2 * h + 1];
      reinterpret_cast<float*>(ws + p.summed_off)[(int64_t(t) * a.n_kv_heads + kvh) * p.ck_max + i0 + tid] = summed;
    }
  }
}

// ---- select: pooled block scores, the keep() best by rank, ascending ----
// The rule (the twin's sparse_keep_best_blocks): block k is kept iff fewer than keep blocks rank above it, j
// ranking above k iff score[j] > score[k] or (score[j] == score[k] and j < k). In that strict total order the
// kept blocks are the first keep; with T the keep-th largest score (counted with multiplicity) and A the
// number of scores above T (A < keep), they are every block scoring above T and the keep - A lowest-indexed
// blocks scoring T. T is found by a radix select (8 bits a pass, most significant first) over the scores'
// order-preserving uint32 images: O(blocks) a pass instead of ranking every block against every other.

// A float's order-preserving image: x < y iff key(x) < key(y), x == y iff key(x) == key(y) (so both zeros map
// to one key, as -0 == +0). Pooled scores are never NaN (maxima of probabilities, +inf, -inf).
__device__ __forceinline__ uint32_t order_key(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) == 0u) u = 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(kSelectThreads) select_kernel(SparseAttentionArgs a, SparseAttentionPlan p, char* ws) {
  static_assert(kSelectThreads == 256, "one thread per radix bin");
  const int t = blockIdx.x, kvh = blockIdx.y;
  const int b = seq_of(a.q_offsets, a.batch, t);
  if (b < 0) return;
  const SparseParams& sp = a.sp;
  const int pos = a.prefix_lens[b] + t - a.q_offsets[b];
  const int qb = pos / sp.block_size, nblocks = qb + 1;
  const int64_t row = int64_t(t) * a.n_kv_heads + kvh;
  int32_t* sel = reinterpret_cast<int32_t*>(ws + p.selected_off) + row * p.max_selected;
  int32_t* count = reinterpret_cast<int32_t*>(ws + p.counts_off) + row;
  const int tid = threadIdx.x, lane = tid % 32;
  if (!d_selects(pos, sp)) {
    for (int i = tid; i < nblocks; i += kSelectThreads) sel[i] = i;
    if (tid == 0) *count = nblocks;
    return;
  }
  extern __shared__ uint32_t key[];   // [max_blocks] order_key of each block's score
  __shared__ int hist[256];           // a pass's digit counts, then their suffix sums
  __shared__ int found_digit, found_need;
  const float* summed = reinterpret_cast<const float*>(ws + p.summed_off) + row * p.ck_max;
  const int nc = min(d_compressed(pos + 1, sp), a.ck_capacity);
  const int r = sp.block_size / sp.kernel_stride, local = sp.window_size / sp.block_size;
  for (int k = tid; k < nblocks; k += kSelectThreads) {
    float m = -INFINITY;
    if (k < sp.init_blocks || k >= qb - local) {
      m = INFINITY;
    } else {
      for (int i = max(0, k * r - 1); i < min(nc, k * r + r); ++i) m = fmaxf(m, summed[i]);
    }
    key[k] = order_key(m);
  }
  int need = min(sp.topk + local, nblocks);
  if (need == 0) {   // top-k 0 without a local window: nothing is kept (need is the CTA's, so all return)
    if (tid == 0) *count = 0;
    return;
  }
  // Radix select of T. Invariant at each pass: the blocks whose key agrees with `prefix` on the bits of `mask`
  // number at least `need` >= 1 (at first all nblocks >= min(keep, nblocks)), and T is the need-th largest of
  // them. The pass picks the largest digit d with (blocks of digit >= d) >= need, which exists as the count
  // for digit 0 is all of them and for a digit past 255 none, and drops from need the blocks of a digit above
  // d (fewer than need: need stays >= 1), which rank above T; summed over the passes those are exactly the A
  // blocks above T, so the final need is keep - A, the number of blocks scoring T that are kept.
  uint32_t prefix = 0u, mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid] = 0;
    __syncthreads();   // hist cleared; at the first pass also every key written
    // Whole warps iterate together (base is uniform) so the lanes of one digit add once (__match_any_sync):
    // the top digits of similar scores coincide, and 32 lanes adding to one shared counter would serialise.
    for (int base = 0; base < nblocks; base += kSelectThreads) {
      const int k = base + tid;
      const uint32_t x = k < nblocks ? key[k] : 0u;
      const bool counted = k < nblocks && (x & mask) == prefix;
      const int digit = counted ? int((x >> shift) & 255u) : 256;
      const unsigned peers = __match_any_sync(0xffffffffu, digit);
      if (counted && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
    }
    __syncthreads();
    // Suffix sums: hist[d] = blocks of digit >= d (Hillis-Steele, one bin a thread).
    for (int off = 1; off < 256; off *= 2) {
      const int v = tid + off < 256 ? hist[tid + off] : 0;
      __syncthreads();
      hist[tid] += v;
      __syncthreads();
    }
    // hist is non-increasing with hist[0] >= need: exactly one thread finds the largest such digit.
    const int above = tid < 255 ? hist[tid + 1] : 0;
    if (hist[tid] >= need && above < need) {
      found_digit = tid;
      found_need = need - above;
    }
    __syncthreads();
    prefix |= uint32_t(found_digit) << shift;
    mask |= 255u << shift;
    need = found_need;
    __syncthreads();   // every thread has read hist and found_* before the next pass rewrites them
  }
  // Ascending list: blocks above T, and the first `need` blocks scoring T in block order.
  if (tid < 32) {
    const unsigned below_lane = (1u << lane) - 1u;
    int written = 0, ties = 0;
    for (int base = 0; base < nblocks; base += 32) {
      const int k = base + lane;
      const uint32_t x = k < nblocks ? key[k] : 0u;
      const bool tie = k < nblocks && x == prefix;
      const unsigned ties_here = __ballot_sync(0xffffffffu, tie);
      const bool f = k < nblocks && (x > prefix || (tie && ties + __popc(ties_here & below_lane) < need));
      const unsigned ballot = __ballot_sync(0xffffffffu, f);
      if (f) sel[written + __popc(ballot & below_lane)] = k;
      written += __popc(ballot);
      ties += __popc(ties_here);
    }
    if (tid == 0) *count = written;
  }
}

// ---- attend: the group's query heads as the 16 rows of an m16n8k16 tile over the selected tiles ----
template <int = 0>
__device__ __forceinline__ void ldsm_x4(uint32_t* r, const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
template <int = 0>
__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// One 16-byte cache vector into shared memory as MMA elements (16-bit as is; fp8 widened to fp16).
template <KvCacheDtype KV>
__device__ __forceinline__ void store_kv16(uint16_t* dst, const uint4& raw) {
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

__host__ __device__ constexpr int attn_stride(int d) { return d + 8; }
constexpr size_t attn_smem(int d) {
  const size_t tiles = size_t(kRows + 2 * 2 * kTile) * attn_stride(d) * 2;
  const size_t merge = size_t(4) * kRows * (d + 2) * sizeof(float);
  return tiles > merge ? tiles : merge;
}

template <KvCacheDtype KV, int D>
__global__ void __launch_bounds__(kAttnThreads) attend_kernel(SparseAttentionArgs a, SparseAttentionPlan p, char* ws,
                                                              float q_scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // never launched: can_implement refuses devices without mma.sync m16n8k16
#else
  using T = std::conditional_t<KV == KvCacheDtype::kBf16, __nv_bfloat16, __half>;
  constexpr int kStride = attn_stride(D);
  constexpr int kVec = kKvVec<KV>;
  constexpr int kChunksPerRow = D / kVec;
  constexpr int kChunks = kTile * kChunksPerRow / kAttnThreads;
  constexpr int kElemBytes = kKvBytes<KV>;
  constexpr int kKSteps = D / 16;
  constexpr int kOBlocks = D / 8;
  constexpr bool kFp8 = kKvBytes<KV> == 1;
  static_assert(kTile * kChunksPerRow % kAttnThreads == 0, "tile / thread shape");

  extern __shared__ __align__(16) uint16_t smem16[];
  uint16_t* q_s = smem16;                      // [kRows][kStride]
  uint16_t* kv_s = q_s + kRows * kStride;      // [2 stages][K, V][kTile][kStride]

  const int t = blockIdx.x, split = blockIdx.z;
  const int kvh = blockIdx.y / p.head_tiles, ht = blockIdx.y % p.head_tiles;
  const int b = seq_of(a.q_offsets, a.batch, t);
  if (b < 0) return;
  const SparseParams& sp = a.sp;
  const int pos = a.prefix_lens[b] + t - a.q_offsets[b];
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t row = int64_t(t) * a.n_kv_heads + kvh;
  const int32_t* sel = reinterpret_cast<const int32_t*>(ws + p.selected_off) + row * p.max_selected;
  const int count = reinterpret_cast<const int32_t*>(ws + p.counts_off)[row];
  const int tiles_per_block = sp.block_size / kTile;
  const int n_tiles = count * tiles_per_block;
  const int per = (n_tiles + p.splits - 1) / p.splits;
  const int tile0 = split * per, tile1 = min(n_tiles, tile0 + per);
  const int32_t* bt = a.block_table + int64_t(b) * a.block_table_stride;
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);
  const int64_t q_stride = a.q_stride ? a.q_stride : int64_t(a.n_heads) * D;
  const int64_t out_stride = a.out_stride ? a.out_stride : int64_t(a.n_heads) * D;
  const int head0 = kvh * group + ht * kRows;           // first query head of this CTA
  const int rows = min(kRows, group - ht * kRows);      // valid rows

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const attn_detail::PageDiv pd(a.page_size);
  auto tile_start = [&](int tile) { return __ldg(sel + tile / tiles_per_block) * sp.block_size + (tile % tiles_per_block) * kTile; };
  // Loads tile `tile` into stage st; tokens past pos read as zeros (16-bit: in flight until cp_async_wait).
  auto load_tile = [&](int tile, int st) {
    uint16_t* ks = kv_s + 2 * st * kTile * kStride;
    uint16_t* vs = ks + kTile * kStride;
    const int t0 = tile_start(tile);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = tid + i * kAttnThreads;
      const int tok = c / kChunksPerRow, part = c % kChunksPerRow;
      const int tt = t0 + tok;
      int64_t off = 0;
      if (tt <= pos) {
        const int page = __ldg(bt + pd.page(tt));
        off = ((int64_t(page) * a.n_kv_heads + kvh) * a.page_size + pd.slot(tt)) * D + part * kVec;
      }
      if constexpr (!kFp8) {
        const int n = tt <= pos ? 16 : 0;
        cp_async16(&ks[tok * kStride + part * kVec], kc + off * kElemBytes, n);
        cp_async16(&vs[tok * kStride + part * kVec], vc + off * kElemBytes, n);
      } else {
        const uint4 zero = make_uint4(0, 0, 0, 0);
        store_kv16<KV>(&ks[tok * kStride + part * kVec], tt <= pos ? load16(kc + off * kElemBytes) : zero);
        store_kv16<KV>(&vs[tok * kStride + part * kVec], tt <= pos ? load16(vc + off * kElemBytes) : zero);
      }
    }
    if constexpr (!kFp8) cp_async_commit();
  };
  if (tile0 < tile1) load_tile(tile0, 0);

  // q rows (query heads head0 ..), scaled by softmax_scale * log2(e) (and k_scale for fp8), rounded to T.
  const float qs = q_scale * (kFp8 ? a.k_scale : 1.f);
  for (int i = tid; i < kRows * D / 2; i += kAttnThreads) {
    const int r = (2 * i) / D, d = (2 * i) % D;
    float x0 = 0.f, x1 = 0.f;
    if (r < rows) {
      const int64_t base = int64_t(t) * q_stride + int64_t(head0 + r) * D + d;
      x0 = load_act(a.q, a.act_dtype, base) * qs;
      x1 = load_act(a.q, a.act_dtype, base + 1) * qs;
    }
    *reinterpret_cast<uint32_t*>(&q_s[r * kStride + d]) = pack2<T>(x0, x1);
  }
  __syncthreads();
  uint32_t qf[kKSteps][4];
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) ldsm_x4(qf[kk], &q_s[(lane % 16) * kStride + (lane / 16) * 8 + kk * 16]);

  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
  float o[kOBlocks][4];
#pragma unroll
  for (int nd = 0; nd < kOBlocks; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;

  for (int tile = tile0; tile < tile1; ++tile) {
    const int st = (tile - tile0) % 2;
    if constexpr (!kFp8) cp_async_wait<0>();
    __syncthreads();  // tile in stage st for every thread; the other stage free
    if (tile + 1 < tile1) load_tile(tile + 1, st ^ 1);
    const uint16_t* k_s = kv_s + 2 * st * kTile * kStride;
    const uint16_t* v_s = k_s + kTile * kStride;
    const int key0 = tile_start(tile) + warp * 16;   // this warp's 16 tokens
    if (key0 <= pos) {
      float s[2][4];
#pragma unroll
      for (int j = 0; j < 2; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t kb[4];
        ldsm_x4(kb, &k_s[(warp * 16 + (lane / 16) * 8 + lane % 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8]);
        mma16816<T>(s[0], qf[kk], kb[0], kb[1]);
        mma16816<T>(s[1], qf[kk], kb[2], kb[3]);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = key0 + j * 8 + 2 * t4;
        if (key > pos) s[j][0] = s[j][2] = -INFINITY;
        if (key + 1 > pos) s[j][1] = s[j][3] = -INFINITY;
      }
      float mt_lo = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
      float mt_hi = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
#pragma unroll
      for (int off = 1; off < 4; off *= 2) {
        mt_lo = fmaxf(mt_lo, __shfl_xor_sync(0xffffffffu, mt_lo, off));
        mt_hi = fmaxf(mt_hi, __shfl_xor_sync(0xffffffffu, mt_hi, off));
      }
      // key0 <= pos: every row has a finite score in this slice.
      const float mn_lo = fmaxf(m_lo, mt_lo), mn_hi = fmaxf(m_hi, mt_hi);
      const float al_lo = fast_exp2(m_lo - mn_lo), al_hi = fast_exp2(m_hi - mn_hi);
      m_lo = mn_lo;
      m_hi = mn_hi;
      float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        s[j][0] = fast_exp2(s[j][0] - mn_lo);
        s[j][1] = fast_exp2(s[j][1] - mn_lo);
        s[j][2] = fast_exp2(s[j][2] - mn_hi);
        s[j][3] = fast_exp2(s[j][3] - mn_hi);
        sum_lo += s[j][0] + s[j][1];
        sum_hi += s[j][2] + s[j][3];
      }
      l_lo = l_lo * al_lo + sum_lo;
      l_hi = l_hi * al_hi + sum_hi;
#pragma unroll
      for (int nd = 0; nd < kOBlocks; ++nd) {
        o[nd][0] *= al_lo;
        o[nd][1] *= al_lo;
        o[nd][2] *= al_hi;
        o[nd][3] *= al_hi;
      }
      const uint32_t pa[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]), pack2<T>(s[1][0], s[1][1]),
                              pack2<T>(s[1][2], s[1][3])};
#pragma unroll
      for (int nd = 0; nd < kOBlocks; nd += 2) {
        uint32_t vb[4];
        ldsm_x4_trans(vb, &v_s[(warp * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kStride + nd * 8 + (lane / 16) * 8]);
        mma16816<T>(o[nd], pa, vb[0], vb[1]);
        mma16816<T>(o[nd + 1], pa, vb[2], vb[3]);
      }
    }
  }
#pragma unroll
  for (int off = 1; off < 4; off *= 2) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  // Merge the four warps: each leaves its (o, m, l) per row in shared memory (over the tiles, now unused).
  __syncthreads();
  float* mo = reinterpret_cast<float*>(smem16);   // [4][kRows][D + 2]: o, then m, l
  {
    float* w = mo + warp * kRows * (D + 2);
#pragma unroll
    for (int nd = 0; nd < kOBlocks; ++nd) {
      const int d = nd * 8 + 2 * t4;
      w[g * (D + 2) + d] = o[nd][0];
      w[g * (D + 2) + d + 1] = o[nd][1];
      w[(g + 8) * (D + 2) + d] = o[nd][2];
      w[(g + 8) * (D + 2) + d + 1] = o[nd][3];
    }
    if (t4 == 0) {
      w[g * (D + 2) + D] = m_lo;
      w[g * (D + 2) + D + 1] = l_lo;
      w[(g + 8) * (D + 2) + D] = m_hi;
      w[(g + 8) * (D + 2) + D + 1] = l_hi;
    }
  }
  __syncthreads();
  const float v_scale = kFp8 ? a.v_scale : 1.f;
  float* part = p.splits > 1 ? reinterpret_cast<float*>(ws + p.attn_off) +
                                   (((row * p.head_tiles + ht) * p.splits + split) * kRows) * (D + 2)
                             : nullptr;
  for (int i = tid; i < kRows * D; i += kAttnThreads) {
    const int r = i / D, d = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) M = fmaxf(M, mo[(w * kRows + r) * (D + 2) + D]);
    float L = 0.f, O = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float* x = mo + (w * kRows + r) * (D + 2);
        if (x[D] == -INFINITY) continue;
        const float f = fast_exp2(x[D] - M);
        L += x[D + 1] * f;
        O += x[d] * f;
      }
    }
    if (part) {
      part[r * (D + 2) + d] = O;
      if (d == 0) {
        part[r * (D + 2) + D] = M;
        part[r * (D + 2) + D + 1] = L;
      }
    } else if (r < rows) {
      store_act(a.out, a.act_dtype, int64_t(t) * out_stride + int64_t(head0 + r) * D + d, O / L * v_scale);
    }
  }
#endif
}

// Merges the splits' partials of one (token, query head).
__global__ void combine_kernel(SparseAttentionArgs a, SparseAttentionPlan p, const char* ws, int D) {
  const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  if (seq_of(a.q_offsets, a.batch, t) < 0) return;
  const int group = a.n_heads / a.n_kv_heads;
  const int kvh = h / group, r = h % group, ht = r / kRows, rr = r % kRows;
  const float* part = reinterpret_cast<const float*>(ws + p.attn_off) +
                      (((int64_t(t) * a.n_kv_heads + kvh) * p.head_tiles + ht) * p.splits) * kRows * (D + 2);
  float M = -INFINITY;
  for (int s = 0; s < p.splits; ++s) M = fmaxf(M, part[(s * kRows + rr) * (D + 2) + D]);
  float L = 0.f, O = 0.f;
  for (int s = 0; s < p.splits; ++s) {
    const float* x = part + (s * kRows + rr) * (D + 2);
    if (x[D] == -INFINITY) continue;
    const float f = fast_exp2(x[D] - M);
    L += x[D + 1] * f;
    O += x[d] * f;
  }
  const bool fp8 = kv_dtype_bytes(a.kv_dtype) == 1;
  const int64_t out_stride = a.out_stride ? a.out_stride : int64_t(a.n_heads) * D;
  store_act(a.out, a.act_dtype, int64_t(t) * out_stride + int64_t(h) * D + d, O / L * (fp8 ? a.v_scale : 1.f));
}

// Lets `kernel` take `bytes` of dynamic shared memory. The allowance only ever grows (one per kernel): a
// decode step captured into a CUDA graph at max_context replays after prefill calls that need less (the select
// kernel's shared memory grows with the context), and lowering the function's attribute in those calls would
// take back what the graph's launch was allowed. Up to the 48 KiB every launch may take, nothing is set.
template <auto kernel>
cudaError_t allow_smem(size_t bytes) {
  static std::mutex mu;
  static size_t allowed = 48 << 10;
  std::lock_guard<std::mutex> lock(mu);
  if (bytes <= allowed) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e == cudaSuccess) allowed = bytes;
  return e;
}

template <KvCacheDtype KV, int D>
cudaError_t launch_attend(const SparseAttentionArgs& a, const SparseAttentionPlan& p, char* ws, float q_scale,
                          cudaStream_t stream) {
  auto* kernel = attend_kernel<KV, D>;
  const cudaError_t e = allow_smem<attend_kernel<KV, D>>(attn_smem(D));
  if (e != cudaSuccess) return e;
  kernel<<<dim3(a.total_q, a.n_kv_heads * p.head_tiles, p.splits), kAttnThreads, attn_smem(D), stream>>>(a, p, ws, q_scale);
  return cudaGetLastError();
}

template <int D>
cudaError_t launch_attend_d(const SparseAttentionArgs& a, const SparseAttentionPlan& p, char* ws, float q_scale,
                            cudaStream_t stream) {
  switch (a.kv_dtype) {
    case KvCacheDtype::kBf16: return launch_attend<KvCacheDtype::kBf16, D>(a, p, ws, q_scale, stream);
    case KvCacheDtype::kFp16: return launch_attend<KvCacheDtype::kFp16, D>(a, p, ws, q_scale, stream);
    case KvCacheDtype::kFp8E4M3: return launch_attend<KvCacheDtype::kFp8E4M3, D>(a, p, ws, q_scale, stream);
    case KvCacheDtype::kFp8E5M2: return launch_attend<KvCacheDtype::kFp8E5M2, D>(a, p, ws, q_scale, stream);
  }
  return cudaErrorInvalidValue;
}

size_t scores_smem(int group, int d) { return size_t(group * d + kCk * (d + 4) + group * kCk + 2 * group) * sizeof(float); }

template <int D>
cudaError_t launch_scores(const SparseAttentionArgs& a, const SparseAttentionPlan& p, char* ws, cudaStream_t stream) {
  const size_t smem = scores_smem(a.n_heads / a.n_kv_heads, D);
  const dim3 grid(a.total_q, a.n_kv_heads, p.ck_chunks);
  cudaError_t e = allow_smem<scores_kernel<D, false>>(smem);
  if (e == cudaSuccess) e = allow_smem<scores_kernel<D, true>>(smem);
  if (e != cudaSuccess) return e;
  scores_kernel<D, false><<<grid, kScoreThreads, smem, stream>>>(a, p, ws);
  scores_kernel<D, true><<<grid, kScoreThreads, smem, stream>>>(a, p, ws);
  return cudaGetLastError();
}

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

std::string sparse_attention_can_implement(const SparseAttentionArgs& a) {
  const std::string base = paged_attention_check(a.n_heads, a.n_kv_heads, a.head_dim, a.page_size, a.block_table_stride,
                                                 a.kv_dtype, a.act_dtype, a.k_cache, a.v_cache, a.q_stride, a.out_stride);
  if (!base.empty()) return base;
  if (a.head_dim != 64 && a.head_dim != 128) return "head_dim: allowed 64, 128";
  const SparseParams& sp = a.sp;
  if (sp.kernel_stride < 1 || sp.kernel_size < 1) return "sp.kernel_size, sp.kernel_stride: must be >= 1";
  if (sp.block_size < kTile || sp.block_size % kTile != 0 || sp.block_size % sp.kernel_stride != 0)
    return "sp.block_size: must be a multiple of 64 and of sp.kernel_stride (" + std::to_string(sp.kernel_stride) + ")";
  if (sp.window_size < 0 || sp.window_size % sp.block_size != 0) return "sp.window_size: must be a multiple of sp.block_size";
  if (sp.topk < 0 || sp.init_blocks < 0 || sp.dense_len < 1)
    return "sp.topk, sp.init_blocks: must be >= 0; sp.dense_len: must be >= 1";
  if (a.batch < 1 || a.total_q < 1 || a.max_q_len < 1 || a.max_context < 1)
    return "batch, total_q, max_q_len, max_context: must be >= 1";
  if (a.batch > 65535) return "batch: at most 65535 sequences a call (a grid dimension)";
  if (!a.ck || !a.ck_slots || !a.q || !a.out || !a.block_table || !a.q_offsets || !a.prefix_lens)
    return "q, out, block_table, q_offsets, prefix_lens, ck, ck_slots: must be device pointers";
  if (reinterpret_cast<uintptr_t>(a.ck) % 16 != 0) return "ck: must be 16-byte aligned";
  if (a.ck_capacity < sparse_compressed_keys(a.max_context, sp))
    return "ck_capacity: " + std::to_string(a.ck_capacity) + " < the " +
           std::to_string(sparse_compressed_keys(a.max_context, sp)) + " compressed keys of max_context";
  if (sparse_max_blocks(a.max_context, sp.block_size) > 16384) return "max_context: at most 16384 blocks";
  if (a.n_heads / a.n_kv_heads > 64) return "n_heads / n_kv_heads: at most 64";
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    cudaGetLastError();
    return "device: no CUDA device answers";
  }
  if (major < 8) return "device: compute capability 8.0 or later (mma.sync m16n8k16)";
  return "";
}

std::string sparse_attention_plan(const SparseAttentionArgs& a, int sm_count, int splits, SparseAttentionPlan* plan) {
  std::string err = sparse_attention_can_implement(a);
  if (!err.empty()) return err;
  if (splits < 0 || splits > kMaxSplits) return "splits: allowed 0 (choose) .. " + std::to_string(kMaxSplits);
  SparseAttentionPlan p;
  const SparseParams& sp = a.sp;
  const int group = a.n_heads / a.n_kv_heads;
  p.ck_max = std::max(1, sparse_compressed_keys(a.max_context, sp));
  p.ck_chunks = (p.ck_max + kCk - 1) / kCk;
  p.max_blocks = sparse_max_blocks(a.max_context, sp.block_size);
  p.max_selected = sparse_max_selected(a.max_context, sp);
  p.max_new_windows = a.max_q_len / sp.kernel_stride + 1;
  p.head_tiles = (group + kRows - 1) / kRows;
  if (splits == 0) {
    const int items = a.total_q * a.n_kv_heads * p.head_tiles;
    const int max_tiles = p.max_selected * (sp.block_size / kTile);
    splits = std::clamp((2 * std::max(sm_count, 1) + items - 1) / items, 1, std::clamp(max_tiles / 2, 1, kMaxSplits));
  }
  p.splits = splits;
  const size_t rows = size_t(a.total_q) * a.n_kv_heads;
  size_t off = 0;
  p.partial_off = off;
  off = align256(off + rows * p.ck_chunks * group * 2 * sizeof(float));
  p.summed_off = off;
  off = align256(off + rows * p.ck_max * sizeof(float));
  p.selected_off = off;
  off = align256(off + rows * p.max_selected * sizeof(int32_t));
  p.counts_off = off;
  off = align256(off + rows * sizeof(int32_t));
  p.attn_off = off;
  if (p.splits > 1) off = align256(off + rows * p.head_tiles * p.splits * kRows * (a.head_dim + 2) * sizeof(float));
  p.workspace_bytes = off;
  *plan = p;
  return "";
}

cudaError_t sparse_attention_run(const SparseAttentionArgs& a, const SparseAttentionPlan& p, void* workspace,
                                 cudaStream_t stream, int stages) {
  char* ws = static_cast<char*>(workspace);
  cudaError_t e = cudaSuccess;
  if (stages & kSparseCompress) {
    compress_kernel<<<dim3(std::min(p.max_new_windows, 4096), a.n_kv_heads, a.batch), a.head_dim, 0, stream>>>(a);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  if (stages & kSparseScores) {
    e = a.head_dim == 64 ? launch_scores<64>(a, p, ws, stream) : launch_scores<128>(a, p, ws, stream);
    if (e != cudaSuccess) return e;
  }
  if (stages & kSparseSelect) {
    const size_t sel_smem = size_t(p.max_blocks) * sizeof(uint32_t);
    if ((e = allow_smem<select_kernel>(sel_smem)) != cudaSuccess) return e;
    select_kernel<<<dim3(a.total_q, a.n_kv_heads), kSelectThreads, sel_smem, stream>>>(a, p, ws);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  if (!(stages & kSparseAttend)) return cudaSuccess;
  const float scale = a.softmax_scale > 0.f ? a.softmax_scale : 1.f / std::sqrt(float(a.head_dim));
  e = a.head_dim == 64 ? launch_attend_d<64>(a, p, ws, scale * kLog2e, stream)
                       : launch_attend_d<128>(a, p, ws, scale * kLog2e, stream);
  if (e != cudaSuccess || p.splits == 1) return e;
  combine_kernel<<<dim3(a.total_q, a.n_heads), a.head_dim, 0, stream>>>(a, p, ws, a.head_dim);
  return cudaGetLastError();
}

}  // namespace soartune::kernels
