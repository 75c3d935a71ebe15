#include "kernels/attention_prefill.cuh"

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

constexpr int kBlockN = 32;       // KV tokens per tile
constexpr int kRowsPerThread = 4;
constexpr int kColThreads = 8;    // threads sharing a query row; each owns kBlockN / 8 keys, D / 8 dims

struct PrefillParams {
  PrefillAttentionArgs a;
  float q_scale;  // softmax_scale * log2(e)
};

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
  const int h = blockIdx.y;
  const int kv_head = h / (a.n_heads / a.n_kv_heads);
  const int qb = gridDim.x - 1 - blockIdx.x;   // the longest causal rows first
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

template <KvCacheDtype KV, int D, int BM>
cudaError_t launch_bm(const PrefillParams& p, const PrefillAttentionPlan& plan, cudaStream_t stream) {
  auto* kernel = prefill_attention_kernel<KV, D, BM>;
  static const cudaError_t attr_err = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_for(BM, D)));
  if (attr_err != cudaSuccess) return attr_err;
  kernel<<<dim3(plan.grid_x, plan.grid_y, plan.grid_z), threads_for(BM), smem_for(BM, D), stream>>>(p);
  return cudaGetLastError();
}

template <KvCacheDtype KV, int D>
cudaError_t launch_d(const PrefillParams& p, const PrefillAttentionPlan& plan, cudaStream_t stream) {
  switch (plan.block_m) {
    case 32: return launch_bm<KV, D, 32>(p, plan, stream);
    case 64: return launch_bm<KV, D, 64>(p, plan, stream);
    case 128: return launch_bm<KV, D, 128>(p, plan, stream);
    default: return cudaErrorInvalidValue;
  }
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
  if (a.n_kv_heads < 1 || a.n_heads < 1 || a.n_heads % a.n_kv_heads != 0)
    return "n_heads, n_kv_heads: n_heads must be a positive multiple of n_kv_heads";
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) return "head_dim: allowed 64, 128, 256";
  if (a.page_size < 1 || a.page_size > 1024) return "page_size: allowed 1..1024";
  if (a.block_table_stride < 1) return "block_table_stride: must be >= 1";
  const int kd = static_cast<int>(a.kv_dtype);
  if (kd < 0 || kd > 3) return "kv_dtype: allowed bf16, fp16, fp8_e4m3, fp8_e5m2";
  const int ad = static_cast<int>(a.act_dtype);
  if (ad < 0 || ad > 2) return "act_dtype: allowed bf16, fp16, fp32";
  if ((reinterpret_cast<uintptr_t>(a.k_cache) | reinterpret_cast<uintptr_t>(a.v_cache)) % 16 != 0)
    return "k_cache, v_cache: must be 16-byte aligned";
  if (a.q_stride < 0 || a.out_stride < 0) return "q_stride, out_stride: must be >= 0";
  return "";
}

std::string prefill_attention_plan(const PrefillAttentionArgs& a, int block_m, PrefillAttentionPlan* plan) {
  std::string err = prefill_attention_can_implement(a);
  if (!err.empty()) return err;
  if (block_m != 32 && block_m != 64 && block_m != 128) return "prefill_attn_block: allowed 32, 64, 128";
  PrefillAttentionPlan p;
  p.block_m = block_m;
  p.block_n = kBlockN;
  p.threads = threads_for(block_m);
  p.grid_x = (a.max_q_len + block_m - 1) / block_m;
  p.grid_y = a.n_heads;
  p.grid_z = a.batch;
  p.smem_bytes = smem_for(block_m, a.head_dim);
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
