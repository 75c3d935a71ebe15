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

// Parses the kv_cache_dtype knob value; false for anything else.
inline bool parse_kv_dtype(std::string_view s, KvCacheDtype* out) {
  for (KvCacheDtype t : {KvCacheDtype::kBf16, KvCacheDtype::kFp16, KvCacheDtype::kFp8E4M3,
                         KvCacheDtype::kFp8E5M2}) {
    if (s == kv_dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
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

}  // namespace soartune::kernels
