// The paged KV cache as the attention kernels, their CPU twins and the KV-write kernel see it.
// Plain C++ (no CUDA), so the engine and the CPU tests can include it.
//
// Layout, per layer, K and V in two separate arrays of the same shape:
//   cache[num_pages][n_kv_heads][page_size][head_dim]      elements of kv_cache_dtype
// Token t of a sequence lives in page block_table[seq][t / page_size], slot t % page_size; the
// element (page, kv_head, slot, d) sits at ((page * n_kv_heads + kv_head) * page_size + slot) * head_dim + d.
// A (page, kv_head) block is page_size * head_dim contiguous elements, so one head's tokens of one
// page are one contiguous run and a head_dim row is 16-byte aligned whenever the base pointer is.
// fp8 values are stored raw; the real value is decode(byte) * k_scale (or v_scale) with a per-layer
// float scale (1.0 when the cache is written without scaling).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace soartune::kernels {

// Storage type of K and V in the cache (FORMATS.md knob kv_cache_dtype).
enum class KvCacheDtype : int { kBf16 = 0, kFp16 = 1, kFp8E4M3 = 2, kFp8E5M2 = 3 };

// Type of the attention kernels' query input and output activations.
enum class ActDtype : int { kBf16 = 0, kFp16 = 1, kFp32 = 2 };

inline constexpr int kv_dtype_bytes(KvCacheDtype t) {
  return (t == KvCacheDtype::kBf16 || t == KvCacheDtype::kFp16) ? 2 : 1;
}
inline constexpr int act_dtype_bytes(ActDtype t) { return t == ActDtype::kFp32 ? 4 : 2; }

inline constexpr const char* kv_dtype_name(KvCacheDtype t) {
  switch (t) {
    case KvCacheDtype::kBf16: return "bf16";
    case KvCacheDtype::kFp16: return "fp16";
    case KvCacheDtype::kFp8E4M3: return "fp8_e4m3";
    case KvCacheDtype::kFp8E5M2: return "fp8_e5m2";
  }
  return "?";
}

// Shape of one layer's K (or V) cache; offsets are in elements.
struct PagedKvLayout {
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;   // tokens per page
  KvCacheDtype dtype = KvCacheDtype::kBf16;

  int64_t page_stride() const { return int64_t(n_kv_heads) * page_size * head_dim; }
  int64_t offset(int64_t page, int kv_head, int slot, int d) const {
    return ((page * n_kv_heads + kv_head) * page_size + slot) * head_dim + d;
  }
  size_t page_bytes() const { return size_t(page_stride()) * kv_dtype_bytes(dtype); }
};

// The checks decode and prefill attention share; "" when the shapes, dtypes and cache pointers can run,
// else a message naming the field and the allowed values.
inline std::string paged_attention_check(int n_heads, int n_kv_heads, int head_dim, int page_size,
                                         int block_table_stride, KvCacheDtype kv_dtype, ActDtype act_dtype,
                                         const void* k_cache, const void* v_cache, int64_t q_stride,
                                         int64_t out_stride) {
  if (n_kv_heads < 1 || n_heads < 1 || n_heads % n_kv_heads != 0)
    return "n_heads, n_kv_heads: n_heads must be a positive multiple of n_kv_heads";
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return "head_dim: allowed 64, 128, 256";
  if (page_size < 1 || page_size > 1024) return "page_size: allowed 1..1024";
  if (block_table_stride < 1) return "block_table_stride: must be >= 1";
  const int kd = static_cast<int>(kv_dtype);
  if (kd < 0 || kd > 3) return "kv_dtype: allowed bf16, fp16, fp8_e4m3, fp8_e5m2";
  const int ad = static_cast<int>(act_dtype);
  if (ad < 0 || ad > 2) return "act_dtype: allowed bf16, fp16, fp32";
  if ((reinterpret_cast<uintptr_t>(k_cache) | reinterpret_cast<uintptr_t>(v_cache)) % 16 != 0)
    return "k_cache, v_cache: must be 16-byte aligned";
  if (q_stride < 0 || out_stride < 0) return "q_stride, out_stride: must be >= 0";
  return "";
}

// One layer's paged KV cache with its query and output buffers: the fields the paged attention kernels'
// arguments (DecodeAttentionArgs, PrefillAttentionArgs, SparseAttentionArgs) share, filled in one place.
struct PagedLayer {
  const void* q = nullptr;
  void* out = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* block_table = nullptr;
  int batch = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, page_size = 0, block_table_stride = 0;
  KvCacheDtype kv_dtype = KvCacheDtype::kBf16;
};

// Args with L's fields set and the rest at their defaults.
template <typename Args>
Args paged_attention_args(const PagedLayer& L) {
  Args a;
  a.q = L.q;
  a.out = L.out;
  a.k_cache = L.k_cache;
  a.v_cache = L.v_cache;
  a.block_table = L.block_table;
  a.batch = L.batch;
  a.n_heads = L.n_heads;
  a.n_kv_heads = L.n_kv_heads;
  a.head_dim = L.head_dim;
  a.page_size = L.page_size;
  a.block_table_stride = L.block_table_stride;
  a.kv_dtype = L.kv_dtype;
  return a;
}

}  // namespace soartune::kernels
