#include "kernels/attention_decode.cuh"

#include "kernels/launch.cuh"

#include <cmath>

#include "kernels/attention_common.cuh"

namespace soartune::kernels {
namespace {

using attn_detail::dequant16;
using attn_detail::kLog2e;
using attn_detail::kKvBytes;
using attn_detail::kKvVec;
using attn_detail::load16;
using attn_detail::load_act;
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
  float out_scale;    // v_scale for fp8 caches, else 1: applied once to the output, not per element
  float* part_o;      // [batch][n_heads][splits][head_dim]   (splits > 1)
  float* part_lse;    // [batch][n_heads][splits], log2 domain
};

// One CTA: sequence blockIdx.z, KV head blockIdx.y / head_chunks, split blockIdx.x. Each thread owns
// kVec consecutive dims (one 16-byte load) of one token per step; kLanes threads cover a head_dim row.
// A tile's K and V loads are issued together into registers before its scores are computed. (A cp.async ring
// of tiles in shared memory, tried on the H200, was slower: it costs occupancy, and at these grid sizes the
// number of resident CTAs, not the bytes in flight per CTA, sets the rate; kernels/attention.md.)
template <KvCacheDtype KV, int D, int G>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(DecodeParams p) {
  // No early trigger here: the next kernel is let in when these CTAs exit.
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
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y / p.head_chunks;
  const int h0 = kv_head * p.group + (blockIdx.y % p.head_chunks) * p.heads_per_cta;
  const int n_h = min(p.heads_per_cta, kv_head * p.group + p.group - h0);
  const int b = blockIdx.z;
  const int tid = threadIdx.x;
  const int li = tid % kLanes;
  const int kg = tid / kLanes;
  const int lane = tid % 32;
  const int warp = tid / 32;

  const int64_t q_stride = a.q_stride ? a.q_stride : int64_t(a.n_heads) * D;
  const int64_t out_stride = a.out_stride ? a.out_stride : int64_t(a.n_heads) * D;
  for (int i = tid; i < G * D; i += kThreads) {
    const int g = i / D, d = i % D;
    q_s[g][d] = g < n_h ? load_act(a.q, a.act_dtype, b * q_stride + int64_t(h0 + g) * D + d) * p.q_scale : 0.f;
  }
  if (tid < G) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }

  const int seq_len = a.seq_lens[b];
  const int n_pages = (seq_len + a.page_size - 1) / a.page_size;
  const int pages_per_split = (n_pages + p.splits - 1) / p.splits;
  const int start = split * pages_per_split * a.page_size;
  const int end = min(seq_len, start + pages_per_split * a.page_size);
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
    for (int w = 0; w < kWarps; ++w) o += red_s[w][g][d];
    const float l = l_s[g];
    const bool empty = start >= end;
    const float val = empty ? 0.f : o * (p.out_scale / l);
    const int h = h0 + g;
    if (p.splits == 1) {
      store_act(a.out, a.act_dtype, b * out_stride + int64_t(h) * D + d, val);
    } else {
      const int64_t row = (int64_t(b) * a.n_heads + h) * p.splits + split;
      p.part_o[row * D + d] = val;
      if (d == 0) p.part_lse[row] = empty ? -INFINITY : m_s[g] + log2f(l);
    }
  }
}

// Merges the splits of one (sequence, query head) by their log-sum-exp.
template <int D>
__global__ void __launch_bounds__(D) decode_combine_kernel(DecodeParams p) {
  pdl_wait();
  pdl_launch_dependents();
  const DecodeAttentionArgs& a = p.a;
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const int64_t row = (int64_t(b) * a.n_heads + h) * p.splits;
  float m = -INFINITY;
  for (int s = 0; s < p.splits; ++s) m = fmaxf(m, p.part_lse[row + s]);
  float num = 0.f, den = 0.f;
  if (m != -INFINITY) {
    for (int s = 0; s < p.splits; ++s) {
      const float w = exp2f(p.part_lse[row + s] - m);
      num += w * p.part_o[(row + s) * D + d];
      den += w;
    }
  }
  const int64_t out_stride = a.out_stride ? a.out_stride : int64_t(a.n_heads) * D;
  store_act(a.out, a.act_dtype, b * out_stride + int64_t(h) * D + d, den > 0.f ? num / den : 0.f);
}

template <KvCacheDtype KV, int D>
cudaError_t launch_d(const DecodeParams& p, const DecodeAttentionPlan& plan, cudaStream_t stream) {
  const dim3 grid(plan.grid_x, plan.grid_y, plan.grid_z);
  cudaError_t err;
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
                                  DecodeAttentionPlan* plan) {
  std::string err = decode_attention_can_implement(a);
  if (!err.empty()) return err;
  if (requested_splits < 0 || requested_splits > kMaxSplits || (requested_splits & (requested_splits - 1)) != 0)
    return "decode_kv_splits: allowed 0, 1, 2, 4, 8, 16, 32, 64, 128";
  DecodeAttentionPlan p;
  p.group_size = a.n_heads / a.n_kv_heads;
  p.heads_per_cta = heads_per_cta_for(p.group_size);
  const int head_chunks = (p.group_size + p.heads_per_cta - 1) / p.heads_per_cta;
  int splits = requested_splits;
  if (splits == 0) {
    const int64_t ctas = int64_t(a.batch) * a.n_kv_heads * head_chunks;
    // About three CTAs per SM (more bytes in flight), each split at least 128 tokens.
    const int64_t target = 3 * int64_t(sm_count > 0 ? sm_count : 132);
    splits = 1;
    while (splits < kMaxSplits && ctas * splits < target && a.max_seq_len / (2 * splits) >= 128) splits *= 2;
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
  p.out_scale = fp8 ? a.v_scale : 1.f;
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
