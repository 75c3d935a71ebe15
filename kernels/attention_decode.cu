#include "kernels/attention_decode.cuh"

#include "kernels/launch.cuh"

#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/attention_common.cuh"

namespace soartune::kernels {
namespace {

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

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadsPerCta = 8;
constexpr int kMaxSplits = kDecodeMaxKvSplits;
// KV tokens per tile, for every cache dtype. A 128-token fp8 tile (same bytes in flight as a 16-bit one)
// measured slower on the H200 (b8 32k: 1128 us against 751 us at 8 splits; kernels/attention.md).
constexpr int kTile = 64;

struct DecodeParams {
  DecodeAttentionArgs a;
  int splits;
  int group;          // query heads per KV head
  int heads_per_cta;
  int head_chunks;    // ceil(group / heads_per_cta)
  float q_scale;      // softmax_scale * log2(e) (* k_scale for fp8): scores live in the log2 domain
  float mma_q_scale;  // softmax_scale * log2(e): the tensor-core kernel's q (rounded to 16 bits) ...
  float mma_s_scale;  // ... and k_scale for fp8 applied to its fp32 scores, so a small k_scale never meets fp16's range
  float out_scale;    // v_scale for fp8 caches, else 1: applied once to the output, not per element
  int min_split_tokens;  // a sequence of L tokens uses min(splits, ceil(L / this)) of its splits
  float* part_o;      // [batch][n_heads][splits][head_dim]   (splits > 1)
  float* part_lse;    // [batch][n_heads][splits], log2 domain
};

// What one CTA serves: sequence blockIdx.z, query heads h0 .. h0 + n_h - 1 of KV head kv_head, and the
// tokens [start, end) of split blockIdx.x (page-aligned ranges of the sequence, fixed at run time).
struct CtaWork {
  int b, split, kv_head, h0, n_h, start, end, seq_len;
  bool idle;  // a split this sequence does not use (its context is short): the CTA returns at once
};

// How many of the plan's splits a sequence of seq_len tokens uses: a plan's splits are sized for the longest
// context a captured graph may see; a shorter sequence spreads over fewer of them, at least min_split_tokens
// each (at batch 1, context 512 and a 4k max_context: 9 of 32, docs/perf-log run 42). The combine reads only these.
__device__ __forceinline__ int used_splits(const DecodeParams& p, int seq_len) {
  return max(1, min(p.splits, (seq_len + p.min_split_tokens - 1) / p.min_split_tokens));
}

__device__ __forceinline__ CtaWork cta_work(const DecodeParams& p) {
  const DecodeAttentionArgs& a = p.a;
  CtaWork w;
  w.b = blockIdx.z;
  w.split = blockIdx.x;
  w.kv_head = blockIdx.y / p.head_chunks;
  w.h0 = w.kv_head * p.group + (blockIdx.y % p.head_chunks) * p.heads_per_cta;
  w.n_h = min(p.heads_per_cta, w.kv_head * p.group + p.group - w.h0);
  const int seq_len = w.seq_len = a.seq_lens[w.b];
  const int n_pages = (seq_len + a.page_size - 1) / a.page_size;
  const int used = used_splits(p, seq_len);
  const int pages_per_split = (n_pages + used - 1) / used;
  w.idle = w.split >= used;
  w.start = w.split * pages_per_split * a.page_size;
  w.end = min(seq_len, w.start + pages_per_split * a.page_size);
  return w;
}

// Writes element d of query head h's result, o_sum / l (times the output scale), with log2 max m: into out
// when there is one split, else into the split's partial row (and its log-sum-exp). l == 0: no token.
template <int D>
__device__ __forceinline__ void store_result(const DecodeParams& p, const CtaWork& w, int h, int d, float o_sum,
                                             float l, float m) {
  const DecodeAttentionArgs& a = p.a;
  const bool empty = l == 0.f;
  const float val = empty ? 0.f : o_sum * (p.out_scale / l);
  if (p.splits == 1) {
    const int64_t out_stride = a.out_stride ? a.out_stride : int64_t(a.n_heads) * D;
    store_act(a.out, a.act_dtype, w.b * out_stride + int64_t(h) * D + d, val);
  } else {
    const int64_t row = (int64_t(w.b) * a.n_heads + h) * p.splits + w.split;
    p.part_o[row * D + d] = val;
    if (d == 0) p.part_lse[row] = empty ? -INFINITY : m + log2f(l);
  }
}

// One CTA: sequence blockIdx.z, KV head blockIdx.y / head_chunks, split blockIdx.x. Each thread owns
// kVec consecutive dims (one 16-byte load) of one token per step; kLanes threads cover a head_dim row.
// A tile's K and V loads are issued together into registers before its scores are computed. (A cp.async ring
// of tiles in shared memory, tried on the H200, was slower: it costs occupancy, and at these grid sizes the
// number of resident CTAs, not the bytes in flight per CTA, sets the rate; kernels/attention.md.)
template <KvCacheDtype KV, int D, int G>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(DecodeParams p) {
  pdl_launch_dependents();  // the combine (or o projection) may become resident now (launch.cuh)
  pdl_wait();
  constexpr int kVec = kKvVec<KV>;
  constexpr int kLanes = D / kVec;            // threads per token row
  constexpr int kTokPerStep = kThreads / kLanes;
  constexpr int kSteps = kTile / kTokPerStep;
  constexpr bool kPrefetchV = kSteps <= 8;
  static_assert(kLanes <= 32 && kSteps >= 1, "tile shape");

  __shared__ __align__(16) float q_s[G][D];
  __shared__ float s_s[G][kTile];
  __shared__ float alpha_s[G], m_s[G], l_s[G];
  __shared__ __align__(16) float red_s[kWarps][G][D];

  const DecodeAttentionArgs& a = p.a;
  const CtaWork w = cta_work(p);
  if (w.idle) return;  // uniform across the CTA; nothing reads this split's partial
  const int kv_head = w.kv_head, h0 = w.h0, n_h = w.n_h, b = w.b, start = w.start, end = w.end;
  const int tid = threadIdx.x;
  const int li = tid % kLanes;
  const int kg = tid / kLanes;
  const int lane = tid % 32;
  const int warp = tid / 32;

  const int64_t q_stride = a.q_stride ? a.q_stride : int64_t(a.n_heads) * D;
  for (int i = tid; i < G * D; i += kThreads) {
    const int g = i / D, d = i % D;
    q_s[g][d] = g < n_h ? load_act(a.q, a.act_dtype, b * q_stride + int64_t(h0 + g) * D + d) * p.q_scale : 0.f;
  }
  if (tid < G) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }

  const int32_t* bt = a.block_table + int64_t(b) * a.block_table_stride;
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);
  constexpr int kElemBytes = kKvBytes<KV>;

  float acc[G][kVec];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[g][i] = 0.f;
  __syncthreads();

  for (int t0 = start; t0 < end; t0 += kTile) {
    // Phase 1: scores of this tile's tokens, loads first so kSteps 16-byte loads are in flight.
    int64_t off[kSteps];
    uint4 kraw[kSteps];
    uint4 vraw[kPrefetchV ? kSteps : 1];
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      const int t = t0 + st * kTokPerStep + kg;
      off[st] = -1;
      if (t < end) {
        const int page = __ldg(bt + t / a.page_size);
        off[st] = ((int64_t(page) * a.n_kv_heads + kv_head) * a.page_size + t % a.page_size) * D + li * kVec;
      }
    }
#pragma unroll
    for (int st = 0; st < kSteps; ++st)
      kraw[st] = off[st] >= 0 ? load16(kc + off[st] * kElemBytes) : make_uint4(0, 0, 0, 0);
    if constexpr (kPrefetchV) {
#pragma unroll
      for (int st = 0; st < kSteps; ++st)
        vraw[st] = off[st] >= 0 ? load16(vc + off[st] * kElemBytes) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      float k[kVec];
      dequant16<KV>(kraw[st], 1.f, k);  // k_scale is folded into q
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.f;
        const float4* qv = reinterpret_cast<const float4*>(&q_s[g][li * kVec]);
#pragma unroll
        for (int i = 0; i < kVec / 4; ++i) {
          const float4 q4 = qv[i];
          dot += q4.x * k[4 * i] + q4.y * k[4 * i + 1] + q4.z * k[4 * i + 2] + q4.w * k[4 * i + 3];
        }
#pragma unroll
        for (int o = kLanes / 2; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (li == 0) s_s[g][st * kTokPerStep + kg] = off[st] >= 0 ? dot : -INFINITY;
      }
    }
    __syncthreads();

    // Phase 2: online-softmax update, one warp per head.
    constexpr int kPerLane = kTile / 32;
    for (int g = warp; g < G; g += kWarps) {
      float sv[kPerLane];
      float mt = -INFINITY;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        sv[j] = s_s[g][lane + 32 * j];
        mt = fmaxf(mt, sv[j]);
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
      const float m_old = m_s[g];
      const float m_new = fmaxf(m_old, mt);   // finite: a tile holds at least one token
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        sv[j] = exp2f(sv[j] - m_new);
        sum += sv[j];
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) s_s[g][lane + 32 * j] = sv[j];
      __syncwarp();
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);
        alpha_s[g] = alpha;
        m_s[g] = m_new;
        l_s[g] = l_s[g] * alpha + sum;
      }
    }
    __syncthreads();

    // Phase 3: rescale and accumulate P V.
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float alpha = alpha_s[g];
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[g][i] *= alpha;
    }
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      uint4 raw;
      if constexpr (kPrefetchV) {
        raw = vraw[st];
      } else {
        raw = off[st] >= 0 ? load16(vc + off[st] * kElemBytes) : make_uint4(0, 0, 0, 0);
      }
      float v[kVec];
      dequant16<KV>(raw, 1.f, v);  // v_scale is applied to the output
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pw = s_s[g][st * kTokPerStep + kg];
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[g][i] += pw * v[i];
      }
    }
    __syncthreads();
  }

  // Sum the token groups: inside the warp by shuffles, then across warps through shared memory.
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < kVec; ++i)
#pragma unroll
      for (int o = kLanes; o < 32; o *= 2) acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], o);
  if (lane < kLanes) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int i = 0; i < kVec; ++i) red_s[warp][g][li * kVec + i] = acc[g][i];
  }
  __syncthreads();

  for (int i = tid; i < n_h * D; i += kThreads) {
    const int g = i / D, d = i % D;
    float o = 0.f;
#pragma unroll
    for (int wp = 0; wp < kWarps; ++wp) o += red_s[wp][g][d];
    store_result<D>(p, w, h0 + g, d, o, start >= end ? 0.f : l_s[g], m_s[g]);
  }
}

// ---- Tensor-core variant (mma.sync m16n8k16, fp32 accumulators), head_dim 64 and 128 ----
// The (up to 8) query heads of a CTA are the rows of S = Q K^T (a 16-row tile whose rows 8..15 are zero)
// and the columns of O^T = V^T P^T (n = 8), so P goes from S's accumulators into O^T's B fragments without
// leaving registers. Each warp walks its own 16-token slices of the split (slice i to warp i % 4) with its own
// online softmax; the warps merge through shared memory at the end. Operands come straight from 16-byte
// global loads, no shared memory: thread (g = lane / 4, t4 = lane % 4) loads tokens g and 8 + g of K, a quarter
// of each row, and spreads it over the k-steps (a dot product does not care in which order the dims are
// summed, and q is gathered in the same order); it loads tokens 2t4, 2t4+1, 2t4+8, 2t4+9 of V, an eighth of
// each row, and pairs them across tokens with byte permutes into A fragments whose rows are output dims in a
// permuted order, put back in place at the merge. bf16 caches multiply in bf16; fp16 and fp8 caches in fp16
// (fp8 widens exactly); q and P are rounded to that type.
constexpr int kMmaHeads = 8;   // query heads per CTA (the n of O^T's tiles)
constexpr int kSlice = 16;     // tokens per warp step (the k of P V)

// kL2: through L2 only (ld.global.cg), for a row another kernel may have written after this CTA's first loads.
__device__ __forceinline__ uint4 load16_l2(const void* p) { return __ldcg(static_cast<const uint4*>(p)); }

template <int W, bool kL2 = false>
__device__ __forceinline__ void load_words(const char* src, bool ok, uint32_t* w) {
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int i = 0; i < W / 4; ++i) {
      const uint4 v = ok ? (kL2 ? load16_l2(src + 16 * i) : load16(src + 16 * i)) : make_uint4(0, 0, 0, 0);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else {
    static_assert(W == 2, "chunk of 8 bytes");
    const uint2 v = ok ? (kL2 ? __ldcg(reinterpret_cast<const uint2*>(src)) : __ldg(reinterpret_cast<const uint2*>(src)))
                       : make_uint2(0, 0);
    w[0] = v.x, w[1] = v.y;
  }
}

template <KvCacheDtype KV, int D>
struct MmaChunks {
  static constexpr int kBytes = kKvBytes<KV>;
  // K: 4 threads (t4) share a row; thread t4's load i covers row bytes [(4 i + t4) * 16, + 16).
  static constexpr int kKWords = D / 4 * kBytes / 4;
  static constexpr int kKElemsPerLoad = 16 / kBytes;
  // V: 8 threads (g) share a row; thread g's load i covers row bytes [(8 i + g) * L, + L), L = min(16, D / 8 * bytes).
  static constexpr int kVWords = D / 8 * kBytes / 4;
  static constexpr int kVLoadBytes = kVWords * 4 < 16 ? kVWords * 4 : 16;
  static constexpr int kVElemsPerLoad = kVLoadBytes / kBytes;
  // Row dim of element e of thread t4's K chunk, and of element e of thread g's V chunk.
  static __device__ __forceinline__ int k_dim(int t4, int e) {
    return ((e / kKElemsPerLoad) * 4 + t4) * kKElemsPerLoad + e % kKElemsPerLoad;
  }
  static __device__ __forceinline__ int v_dim(int g, int e) {
    return ((e / kVElemsPerLoad) * 8 + g) * kVElemsPerLoad + e % kVElemsPerLoad;
  }
};

template <int W, int kLoadBytes, bool kL2 = false>
__device__ __forceinline__ void load_chunk(const char* row, int lane_in_row, int lanes, bool ok, uint32_t* w) {
  constexpr int kLoads = W * 4 / kLoadBytes;
#pragma unroll
  for (int i = 0; i < kLoads; ++i)
    load_words<kLoadBytes / 4, kL2>(row + (i * lanes + lane_in_row) * kLoadBytes, ok, w + i * (kLoadBytes / 4));
}

template <KvCacheDtype KV, int D, bool kAhead>
__global__ void __launch_bounds__(kThreads) decode_attention_mma_kernel(DecodeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // never launched: the plan picks SIMT when the built code predates mma.sync m16n8k16
#else
  // The combine (or o projection) may become resident now and start its own prefetches: with a few dozen
  // CTAs at short context most SMs would otherwise idle through this kernel.
  pdl_launch_dependents();
  if (!kAhead) pdl_wait();  // else the slice-ahead form waits after its first loads (below)
  using T = std::conditional_t<KV == KvCacheDtype::kBf16, __nv_bfloat16, __half>;
  using C = MmaChunks<KV, D>;
  constexpr bool kFp8 = kKvBytes<KV> == 1;
  constexpr int kKSteps = D / 16;  // k-steps of S = Q K^T, and m-blocks of O^T
  constexpr int kElemBytes = kKvBytes<KV>;

  __shared__ float o_s[kWarps][kMmaHeads][D];
  __shared__ float m_s[kWarps][kMmaHeads], l_s[kWarps][kMmaHeads];

  const DecodeAttentionArgs& a = p.a;
  const CtaWork cw = cta_work(p);
  if (cw.idle) return;  // uniform across the CTA; nothing reads this split's partial
  const int kv_head = cw.kv_head, h0 = cw.h0, n_h = cw.n_h, b = cw.b, start = cw.start, end = cw.end;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int64_t q_stride = a.q_stride ? a.q_stride : int64_t(a.n_heads) * D;

  // q's A fragments: row g = head h0 + g; k-step kk takes elements 4 kk .. 4 kk + 3 of this thread's K chunk.
  uint32_t qa[kKSteps][2];
  auto load_q = [&] {
    const int64_t base = b * q_stride + int64_t(h0 + g) * D;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      float x[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        x[i] = g < n_h ? load_act(a.q, a.act_dtype, base + C::k_dim(t4, 4 * kk + i)) * p.mma_q_scale : 0.f;
      qa[kk][0] = pack2<T>(x[0], x[1]);
      qa[kk][1] = pack2<T>(x[2], x[3]);
    }
  };
  if constexpr (!kAhead) load_q();

  const int32_t* bt = a.block_table + int64_t(b) * a.block_table_stride;
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);
  // Slices start page-aligned plus a multiple of 16, so with such pages a slice never crosses a page.
  const bool one_page = a.page_size % kSlice == 0;
  const float s_scale = p.mma_s_scale;

  float o[kKSteps][4];
#pragma unroll
  for (int mb = 0; mb < kKSteps; ++mb) o[mb][0] = o[mb][1] = o[mb][2] = o[mb][3] = 0.f;
  float m = -INFINITY, l = 0.f;

  using KWords = uint32_t[2][C::kKWords];
  using VWords = uint32_t[4][C::kVWords];
  // Issues slice t0's K and V loads (tokens from end on, and token `skip`, read as zeros: unused slots may hold
  // NaN); kL2 loads through L2 only.
  auto load_slice = [&](int t0, KWords& kw, VWords& vw, int skip, auto l2) {
    constexpr bool kL2 = decltype(l2)::value;
    int64_t slice_base = 0;  // element offset of token t0's row, when the slice sits in one page
    if (one_page) {
      const int page = __ldg(bt + t0 / a.page_size);
      slice_base = ((int64_t(page) * a.n_kv_heads + kv_head) * a.page_size + t0 % a.page_size) * D;
    }
    // Byte offset of token t0 + i's row (only for tokens before end).
    auto row = [&](int i) -> int64_t {
      if (one_page) return (slice_base + int64_t(i) * D) * kElemBytes;
      const int t = t0 + i;
      const int page = __ldg(bt + t / a.page_size);
      return (((int64_t(page) * a.n_kv_heads + kv_head) * a.page_size + t % a.page_size) * D) * kElemBytes;
    };
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int i = 8 * j + g;
      const bool ok = t0 + i < end && t0 + i != skip;
      load_chunk<C::kKWords, 16, kL2>(kc + (ok ? row(i) : 0), t4, 4, ok, kw[j]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = 2 * t4 + (j & 1) + 8 * (j >> 1);
      const bool ok = t0 + i < end && t0 + i != skip;
      load_chunk<C::kVWords, C::kVLoadBytes, kL2>(vc + (ok ? row(i) : 0), g, 8, ok, vw[j]);
    }
  };

  auto compute_slice = [&](int t0, const KWords& kw, const VWords& vw) {
    // S (rows = heads, columns = tokens j * 8 + 2 t4 + {0, 1} of this thread's fragments).
    float s[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      const uint32_t af[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t b0, b1;
        if constexpr (kFp8) {
          b0 = attn_detail::fp8x2_to_half2_bits<KV>(kw[j][kk]);
          b1 = attn_detail::fp8x2_to_half2_bits<KV>(kw[j][kk] >> 16);
        } else {
          b0 = kw[j][2 * kk];
          b1 = kw[j][2 * kk + 1];
        }
        mma16816<T>(s[j], af, b0, b1);
      }
    }
    // Online softmax of head g over this slice (the quad's four threads hold its 16 scores).
    float mt = -INFINITY;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[j][e] = t0 + 8 * j + 2 * t4 + e < end ? s[j][e] * s_scale : -INFINITY;
        mt = fmaxf(mt, s[j][e]);
      }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float m_new = fmaxf(m, mt);  // finite: token t0 is before end
    const float alpha = fast_exp2(m - m_new);
    m = m_new;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[j][e] = fast_exp2(s[j][e] - m_new);
        sum += s[j][e];
      }
    l = l * alpha + sum;  // this thread's part; the quad's parts are summed at the end
    // O^T's columns are heads 2 t4 and 2 t4 + 1, whose alphas live in lanes 8 t4 and 8 t4 + 4.
    const float al0 = __shfl_sync(0xffffffffu, alpha, 8 * t4);
    const float al1 = __shfl_sync(0xffffffffu, alpha, 8 * t4 + 4);
#pragma unroll
    for (int mb = 0; mb < kKSteps; ++mb) {
      o[mb][0] *= al0;
      o[mb][1] *= al1;
      o[mb][2] *= al0;
      o[mb][3] *= al1;
    }

    // O^T += V^T P^T: m-block mb's rows g and g + 8 are elements 2 mb and 2 mb + 1 of this thread's V chunk.
    const uint32_t pb0 = pack2<T>(s[0][0], s[0][1]), pb1 = pack2<T>(s[1][0], s[1][1]);
#pragma unroll
    for (int mb = 0; mb < kKSteps; ++mb) {
      uint32_t af[4];
      if constexpr (kFp8) {
        const int w = mb / 2;
        const uint32_t sel = mb % 2 ? 0x7362u : 0x5140u;  // bytes (x_e, y_e, x_e+1, y_e+1), e = 2 mb % 4
        const uint32_t x01 = __byte_perm(vw[0][w], vw[1][w], sel);
        const uint32_t x23 = __byte_perm(vw[2][w], vw[3][w], sel);
        af[0] = attn_detail::fp8x2_to_half2_bits<KV>(x01);
        af[1] = attn_detail::fp8x2_to_half2_bits<KV>(x01 >> 16);
        af[2] = attn_detail::fp8x2_to_half2_bits<KV>(x23);
        af[3] = attn_detail::fp8x2_to_half2_bits<KV>(x23 >> 16);
      } else {
        af[0] = __byte_perm(vw[0][mb], vw[1][mb], 0x5410u);
        af[1] = __byte_perm(vw[0][mb], vw[1][mb], 0x7632u);
        af[2] = __byte_perm(vw[2][mb], vw[3][mb], 0x5410u);
        af[3] = __byte_perm(vw[2][mb], vw[3][mb], 0x7632u);
      }
      mma16816<T>(o[mb], af, pb0, pb1);
    }
  };

  constexpr int kStride = kWarps * kSlice;
  const int first = start + warp * kSlice;
  if constexpr (!kAhead) {
    for (int t0 = first; t0 < end; t0 += kStride) {
      uint32_t kw[2][C::kKWords], vw[4][C::kVWords];
      load_slice(t0, kw, vw, -1, std::false_type{});
      compute_slice(t0, kw, vw);
    }
  } else {
    // Two register sets: the next slice's loads are in flight while this one is multiplied. The first two
    // slices are asked for before PDL's wait (the block table, seq_lens and every KV row but the newest
    // token's come from the host or earlier steps, not from the kernel before), so their DRAM latency overlaps
    // the previous kernel's drain; the newest token's row, which RoPE writes just before this kernel, is left
    // out of those loads and its slice is loaded again after the wait, through L2.
    uint32_t kw0[2][C::kKWords], vw0[4][C::kVWords], kw1[2][C::kKWords], vw1[4][C::kVWords];
    const int newest = end == cw.seq_len ? end - 1 : -1;  // in this split, or -1
    if (first < end) load_slice(first, kw0, vw0, newest, std::false_type{});
    if (first + kStride < end) load_slice(first + kStride, kw1, vw1, newest, std::false_type{});
    pdl_wait();
    if (newest >= first && newest < first + kSlice)
      load_slice(first, kw0, vw0, -1, std::true_type{});
    else if (newest >= first + kStride && newest < first + kStride + kSlice)
      load_slice(first + kStride, kw1, vw1, -1, std::true_type{});
    load_q();
    for (int t0 = first; t0 < end; t0 += 2 * kStride) {
      compute_slice(t0, kw0, vw0);
      if (t0 + kStride >= end) break;
      if (t0 + 2 * kStride < end) load_slice(t0 + 2 * kStride, kw0, vw0, -1, std::false_type{});
      compute_slice(t0 + kStride, kw1, vw1);
      if (t0 + 3 * kStride < end) load_slice(t0 + 3 * kStride, kw1, vw1, -1, std::false_type{});
    }
  }

  // Merge the warps: each leaves (m, l, O) per head in shared memory, dims back in row order.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (t4 == 0) {
    m_s[warp][g] = m;
    l_s[warp][g] = l;
  }
#pragma unroll
  for (int mb = 0; mb < kKSteps; ++mb) {
    const int d0 = C::v_dim(g, 2 * mb), d1 = C::v_dim(g, 2 * mb + 1);
    o_s[warp][2 * t4][d0] = o[mb][0];
    o_s[warp][2 * t4 + 1][d0] = o[mb][1];
    o_s[warp][2 * t4][d1] = o[mb][2];
    o_s[warp][2 * t4 + 1][d1] = o[mb][3];
  }
  __syncthreads();

  for (int i = tid; i < n_h * D; i += kThreads) {
    const int hh = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w][hh]);
    float num = 0.f, den = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float wt = exp2f(m_s[w][hh] - mx);  // 0 for a warp that saw no token
        num += wt * o_s[w][hh][d];
        den += wt * l_s[w][hh];
      }
    }
    store_result<D>(p, cw, h0 + hh, d, num, den, mx);
  }
#endif
}

// Merges the splits of one (sequence, query head) by their log-sum-exp.
template <int D>
__global__ void __launch_bounds__(D) decode_combine_kernel(DecodeParams p) {
  pdl_launch_dependents();  // the o projection may start its weight loads
  pdl_wait();
  // The splits' log-sum-exps in one round trip (a thread each), then each thread's partial outputs eight
  // loads at a time: the merge is a few L2 latencies, not one a split (4.7 us at 16 splits before, run 23).
  __shared__ float lse_s[kMaxSplits];
  const DecodeAttentionArgs& a = p.a;
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const int64_t row = (int64_t(b) * a.n_heads + h) * p.splits;
  const int splits = used_splits(p, a.seq_lens[b]);  // the splits this sequence wrote
  for (int s = d; s < splits; s += D) lse_s[s] = p.part_lse[row + s];
  __syncthreads();
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, lse_s[s]);
  float num = 0.f, den = 0.f;
  if (m != -INFINITY) {
    const float* po = p.part_o + row * D + d;
    for (int s0 = 0; s0 < splits; s0 += 8) {
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = s0 + j < splits ? po[int64_t(s0 + j) * D] : 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (s0 + j >= splits) break;
        const float w = exp2f(lse_s[s0 + j] - m);  // 0 for a split that saw no token
        num += w * v[j];
        den += w;
      }
    }
  }
  const int64_t out_stride = a.out_stride ? a.out_stride : int64_t(a.n_heads) * D;
  store_act(a.out, a.act_dtype, b * out_stride + int64_t(h) * D + d, den > 0.f ? num / den : 0.f);
}

template <KvCacheDtype KV, int D>
cudaError_t launch_d(const DecodeParams& p, const DecodeAttentionPlan& plan, cudaStream_t stream) {
  const dim3 grid(plan.grid_x, plan.grid_y, plan.grid_z);
  cudaError_t err;
  if constexpr (D <= 128) {
    if (plan.tensor_cores) {
      err = plan.mma_ahead ? launch(decode_attention_mma_kernel<KV, D, true>, grid, kThreads, 0, stream, p)
                           : launch(decode_attention_mma_kernel<KV, D, false>, grid, kThreads, 0, stream, p);
      if (err != cudaSuccess || p.splits == 1) return err;
      return launch(decode_combine_kernel<D>, dim3(p.a.n_heads, p.a.batch), D, 0, stream, p);
    }
  }
  switch (plan.heads_per_cta) {
    case 1: err = launch(decode_attention_kernel<KV, D, 1>, grid, kThreads, 0, stream, p); break;
    case 2: err = launch(decode_attention_kernel<KV, D, 2>, grid, kThreads, 0, stream, p); break;
    case 4: err = launch(decode_attention_kernel<KV, D, 4>, grid, kThreads, 0, stream, p); break;
    case 8: err = launch(decode_attention_kernel<KV, D, 8>, grid, kThreads, 0, stream, p); break;
    default: return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess || p.splits == 1) return err;
  return launch(decode_combine_kernel<D>, dim3(p.a.n_heads, p.a.batch), D, 0, stream, p);
}

template <KvCacheDtype KV>
cudaError_t launch_kv(const DecodeParams& p, const DecodeAttentionPlan& plan, cudaStream_t stream) {
  switch (p.a.head_dim) {
    case 64: return launch_d<KV, 64>(p, plan, stream);
    case 128: return launch_d<KV, 128>(p, plan, stream);
    case 256: return launch_d<KV, 256>(p, plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool mma_kernel_runnable() {
  static const bool ok = attn_detail::built_for_sm80(decode_attention_mma_kernel<KvCacheDtype::kBf16, 128, false>);
  return ok;
}

int heads_per_cta_for(int group) {
  int h = 1;
  while (h < group && h < kMaxHeadsPerCta) h *= 2;
  return h;
}

}  // namespace

std::string decode_attention_can_implement(const DecodeAttentionArgs& a) {
  if (!a.q || !a.out || !a.k_cache || !a.v_cache || !a.block_table || !a.seq_lens)
    return "q, out, k_cache, v_cache, block_table, seq_lens: must all be device pointers (one is null)";
  if (a.batch < 1) return "batch: must be >= 1";
  return paged_attention_check(a.n_heads, a.n_kv_heads, a.head_dim, a.page_size, a.block_table_stride, a.kv_dtype,
                               a.act_dtype, a.k_cache, a.v_cache, a.q_stride, a.out_stride);
}

std::string decode_attention_plan(const DecodeAttentionArgs& a, int requested_splits, int sm_count,
                                  DecodeAttentionPlan* plan, bool allow_tensor_cores) {
  std::string err = decode_attention_can_implement(a);
  if (!err.empty()) return err;
  if (!core::decode_kv_splits_allowed(requested_splits))
    return "decode_kv_splits: " + std::to_string(requested_splits) + " is not one of " +
           core::allowed_list(core::kDecodeKvSplits);
  DecodeAttentionPlan p;
  p.group_size = a.n_heads / a.n_kv_heads;
  p.heads_per_cta = heads_per_cta_for(p.group_size);
  const int head_chunks = (p.group_size + p.heads_per_cta - 1) / p.heads_per_cta;
  p.tensor_cores = allow_tensor_cores && a.head_dim <= 128 && p.heads_per_cta <= kMmaHeads && mma_kernel_runnable();
  p.mma_ahead = p.tensor_cores;
  int splits = requested_splits;
  if (splits == 0) {
    const int64_t ctas = int64_t(a.batch) * a.n_kv_heads * head_chunks;
    const int64_t sms = sm_count > 0 ? sm_count : 132;
    splits = 1;
    if (p.tensor_cores) {
      // The most splits that keep the grid within two CTAs per SM (the slice-ahead kernel keeps two resident
      // for 16-bit caches at 227 registers, three for fp8 at 167), each split at least one 16-token slice for
      // each of its four warps. Measured on the H200 (kernels/attention.md): 256 CTAs beat 512 at every batch
      // and context tried, and beat 128 except at batch 1 / 4k, where they tie. (Decode steps are planned for
      // max_context; a shorter sequence uses fewer of the splits at run time, cta_work.)
      while (splits < kMaxSplits && ctas * (2 * splits) <= 2 * sms &&
             a.max_seq_len / (2 * splits) >= kWarps * kSlice)
        splits *= 2;
    } else {
      // About three CTAs per SM (more bytes in flight), each split at least 128 tokens.
      while (splits < kMaxSplits && ctas * splits < 3 * sms && a.max_seq_len / (2 * splits) >= 128) splits *= 2;
    }
  }
  p.kv_splits = splits;
  p.grid_x = splits;
  p.grid_y = a.n_kv_heads * head_chunks;
  p.grid_z = a.batch;
  p.threads = kThreads;
  p.workspace_bytes =
      splits == 1 ? 0 : size_t(a.batch) * a.n_heads * splits * (size_t(a.head_dim) + 1) * sizeof(float);
  *plan = p;
  return "";
}

cudaError_t decode_attention_run(const DecodeAttentionArgs& a, const DecodeAttentionPlan& plan, void* workspace,
                                 cudaStream_t stream) {
  if (plan.kv_splits > 1 && workspace == nullptr) return cudaErrorInvalidValue;
  DecodeParams p;
  p.a = a;
  p.splits = plan.kv_splits;
  p.group = a.n_heads / a.n_kv_heads;
  p.heads_per_cta = plan.heads_per_cta;
  p.head_chunks = (p.group + p.heads_per_cta - 1) / p.heads_per_cta;
  const float scale = a.softmax_scale != 0.f ? a.softmax_scale : 1.f / std::sqrt(float(a.head_dim));
  const bool fp8 = kv_dtype_bytes(a.kv_dtype) == 1;
  p.q_scale = scale * kLog2e * (fp8 ? a.k_scale : 1.f);
  p.mma_q_scale = scale * kLog2e;
  p.mma_s_scale = fp8 ? a.k_scale : 1.f;
  p.out_scale = fp8 ? a.v_scale : 1.f;
  p.min_split_tokens = plan.tensor_cores ? kWarps * kSlice : 2 * kTile;
  p.part_o = static_cast<float*>(workspace);
  p.part_lse = p.part_o ? p.part_o + size_t(a.batch) * a.n_heads * plan.kv_splits * a.head_dim : nullptr;
  switch (a.kv_dtype) {
    case KvCacheDtype::kBf16: return launch_kv<KvCacheDtype::kBf16>(p, plan, stream);
    case KvCacheDtype::kFp16: return launch_kv<KvCacheDtype::kFp16>(p, plan, stream);
    case KvCacheDtype::kFp8E4M3: return launch_kv<KvCacheDtype::kFp8E4M3>(p, plan, stream);
    case KvCacheDtype::kFp8E5M2: return launch_kv<KvCacheDtype::kFp8E5M2>(p, plan, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace soartune::kernels
