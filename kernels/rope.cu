#include "kernels/rope.cuh"

#include "kernels/launch.cuh"

#include <cuda_bf16.h>

#include "kernels/numeric_formats.h"

namespace soartune::kernels {
namespace {

__device__ __forceinline__ void store_kv(void* cache, int64_t idx, float v, KvCacheDtype dt, float scale) {
  switch (dt) {
    case KvCacheDtype::kBf16: static_cast<uint16_t*>(cache)[idx] = f32_to_bf16(v); break;
    case KvCacheDtype::kFp16: static_cast<uint16_t*>(cache)[idx] = f32_to_fp16(v); break;
    case KvCacheDtype::kFp8E4M3: static_cast<uint8_t*>(cache)[idx] = f32_to_fp8_e4m3(v / scale); break;
    case KvCacheDtype::kFp8E5M2: static_cast<uint8_t*>(cache)[idx] = f32_to_fp8_e5m2(v / scale); break;
  }
}

constexpr int kThreads = 128;

// One CTA per (token, group of heads_per_cta heads of q | k | v). The head_dim / 2 rotation angles of the
// token are computed once per CTA (they are the same for every head) into shared memory; then each thread
// takes element pairs (j, j + half) of the group's heads: q and k rotated, v copied. A prefill takes all of a
// token's heads in one CTA (4096 CTAs for a 4k prompt, one sincos per angle and token); a decode step of a
// few tokens takes one head per CTA, so its few pairs still spread over many SMs.
__global__ void __launch_bounds__(kThreads) rope_kv_kernel(const RopeKvArgs a, int heads_per_cta) {
  extern __shared__ float cs[];  // [half] cos, then [half] sin
  pdl_launch_dependents();
  const int i = blockIdx.x;
  const int hd = a.head_dim, half = hd / 2;
  const int q_dim = a.n_heads * hd;
  const int n_all = a.n_heads + 2 * a.n_kv_heads;
  const int h0 = blockIdx.y * heads_per_cta;
  const int h1 = min(n_all, h0 + heads_per_cta);
  const int64_t stride = a.qkv_stride ? a.qkv_stride : q_dim + 2 * a.n_kv_heads * hd;
  const float* row_f = static_cast<const float*>(a.qkv) + int64_t(i) * stride;
  const __nv_bfloat16* row_b = static_cast<const __nv_bfloat16*>(a.qkv) + int64_t(i) * stride;
  auto in = [&](int c) { return a.qkv_bf16 ? __bfloat162float(row_b[c]) : row_f[c]; };
  const float pos = float(a.positions[i]);
  if (a.rotate && h0 < a.n_heads + a.n_kv_heads) {  // this group rotates something
    for (int j = threadIdx.x; j < half; j += kThreads) {
      const float inv_freq = powf(a.rope_theta, -2.f * float(j) / float(hd));
      sincosf(pos * inv_freq, &cs[half + j], &cs[j]);
    }
  }
  // positions and kv_slot come from the host before the step, not from a kernel: the angles are computed
  // before PDL's wait, while the qkv projection drains.
  const int slot_all = a.kv_slot[i];
  pdl_wait();
  __syncthreads();
  const int page = slot_all / a.page_size, slot = slot_all % a.page_size;
  auto item = [&](int head, int j) {
    const int base = head * hd;  // q heads, k heads, v heads are contiguous in qkv
    float x1 = in(base + j), x2 = in(base + j + half);
    if (a.bias) {
      x1 += a.bias[base + j];
      x2 += a.bias[base + j + half];
    }
    if (head >= a.n_heads + a.n_kv_heads) {
      const int vh = head - a.n_heads - a.n_kv_heads;
      const int64_t off = ((int64_t(page) * a.n_kv_heads + vh) * a.page_size + slot) * hd;
      store_kv(a.v_cache, off + j, x1, a.kv_dtype, a.v_scale);
      store_kv(a.v_cache, off + j + half, x2, a.kv_dtype, a.v_scale);
      return;
    }
    const float c = a.rotate ? cs[j] : 1.f, s = a.rotate ? cs[half + j] : 0.f;
    const float o1 = x1 * c - x2 * s, o2 = x2 * c + x1 * s;
    if (head < a.n_heads) {
      __nv_bfloat16* q = static_cast<__nv_bfloat16*>(a.q_out) + int64_t(i) * q_dim + base;
      q[j] = __float2bfloat16_rn(o1);
      q[j + half] = __float2bfloat16_rn(o2);
    } else {
      const int kh = head - a.n_heads;
      const int64_t off = ((int64_t(page) * a.n_kv_heads + kh) * a.page_size + slot) * hd;
      store_kv(a.k_cache, off + j, o1, a.kv_dtype, a.k_scale);
      store_kv(a.k_cache, off + j + half, o2, a.kv_dtype, a.k_scale);
    }
  };
  if (kThreads % half == 0) {  // each thread keeps one pair index j and walks the heads: no division a pair
    const int j = threadIdx.x % half, step = kThreads / half;
    for (int head = h0 + threadIdx.x / half; head < h1; head += step) item(head, j);
  } else {
    const int n_items = (h1 - h0) * half;
    for (int idx = threadIdx.x; idx < n_items; idx += kThreads) item(h0 + idx / half, idx % half);
  }
}

}  // namespace

std::string rope_kv_can_implement(const RopeKvArgs& a) {
  if (a.head_dim <= 0 || a.head_dim % 2 != 0) return "head_dim: must be a positive even number";
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    return "n_heads / n_kv_heads: heads must be a positive multiple of kv heads";
  if (a.page_size <= 0) return "page_size: must be positive";
  if (a.head_dim > 8192) return "head_dim: must be <= 8192";
  if (!a.qkv || !a.q_out || !a.k_cache || !a.v_cache || !a.positions || !a.kv_slot)
    return "pointers: qkv, q_out, k_cache, v_cache, positions and kv_slot are required";
  return "";
}

cudaError_t rope_kv_write_run(const RopeKvArgs& a, cudaStream_t stream) {
  if (a.tokens == 0) return cudaSuccess;
  // Few tokens (decode): a head per CTA; many (prefill): all of a token's heads share one CTA and its angles
  // (8 heads a CTA measured 2.8 ms over a 4k llama3-8b prefill, 1.1 TB/s: docs/perf-log run 17).
  const int n_all = a.n_heads + 2 * a.n_kv_heads;
  const int heads_per_cta = a.tokens >= 64 ? n_all : 1;
  const dim3 grid(a.tokens, (a.n_heads + 2 * a.n_kv_heads + heads_per_cta - 1) / heads_per_cta);
  return launch(rope_kv_kernel, grid, kThreads, size_t(a.head_dim) * sizeof(float), stream, a, heads_per_cta);
}

}  // namespace soartune::kernels
