// Shared pieces of the attention kernel tests: a paged KV cache filled with random values (NaN in every
// slot no sequence owns, so a kernel that reads past a sequence's end poisons its output), activations in
// each act dtype, and the normalised error.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention_paged.h"
#include "kernels/attention_ref.h"
#include "kernels/numeric_formats.h"

namespace soartune::kernels::test {

// A seed that differs per run (fresh inputs), printed by the tests so a failure can be replayed.
inline uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

inline uint16_t nan_bits16(KvCacheDtype t) { return t == KvCacheDtype::kBf16 ? 0x7fc0 : 0x7e00; }

inline void store_kv(std::vector<uint8_t>& buf, KvCacheDtype t, int64_t i, float real_value, float scale) {
  switch (t) {
    case KvCacheDtype::kBf16: {
      const uint16_t b = f32_to_bf16(real_value);
      std::memcpy(&buf[2 * i], &b, 2);
      break;
    }
    case KvCacheDtype::kFp16: {
      const uint16_t b = f32_to_fp16(real_value);
      std::memcpy(&buf[2 * i], &b, 2);
      break;
    }
    case KvCacheDtype::kFp8E4M3: buf[i] = f32_to_fp8_e4m3(real_value / scale); break;
    case KvCacheDtype::kFp8E5M2: buf[i] = f32_to_fp8_e5m2(real_value / scale); break;
  }
}

struct HostPagedCache {
  PagedKvLayout layout;
  int num_pages = 0;
  std::vector<uint8_t> k, v;            // [num_pages][n_kv_heads][page_size][head_dim] raw
  std::vector<int32_t> block_table;     // [batch][block_table_stride]
  int block_table_stride = 0;
  float k_scale = 1.f, v_scale = 1.f;

  PagedKvView view() const { return {k.data(), v.data(), layout, k_scale, v_scale}; }
};

// Pages are handed out in a shuffled order; spare entries of the block table point at an all-NaN page.
inline HostPagedCache make_paged_cache(std::mt19937_64& rng, PagedKvLayout layout, const std::vector<int>& kv_lens) {
  HostPagedCache c;
  c.layout = layout;
  const bool fp8 = kv_dtype_bytes(layout.dtype) == 1;
  c.k_scale = fp8 ? 0.5f : 1.f;
  c.v_scale = fp8 ? 0.25f : 1.f;
  int max_pages = 0, total = 0;
  for (int len : kv_lens) {
    const int p = (len + layout.page_size - 1) / layout.page_size;
    max_pages = std::max(max_pages, p);
    total += p;
  }
  c.num_pages = total + 2;
  c.block_table_stride = max_pages + 1;
  const int64_t elems = int64_t(c.num_pages) * layout.page_stride();
  const int eb = kv_dtype_bytes(layout.dtype);
  c.k.assign(size_t(elems) * eb, 0);
  c.v.assign(size_t(elems) * eb, 0);
  for (int64_t i = 0; i < elems; ++i) {
    if (eb == 2) {
      const uint16_t nan = nan_bits16(layout.dtype);
      std::memcpy(&c.k[2 * i], &nan, 2);
      std::memcpy(&c.v[2 * i], &nan, 2);
    } else {
      c.k[i] = c.v[i] = 0x7f;   // NaN in both fp8 formats
    }
  }
  std::vector<int32_t> ids(c.num_pages);
  for (int i = 0; i < c.num_pages; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  const int32_t nan_page = ids.back();
  c.block_table.assign(size_t(kv_lens.size()) * c.block_table_stride, nan_page);
  std::normal_distribution<float> nd(0.f, 1.f);
  int next = 0;
  for (size_t b = 0; b < kv_lens.size(); ++b) {
    const int len = kv_lens[b];
    const int pages = (len + layout.page_size - 1) / layout.page_size;
    for (int p = 0; p < pages; ++p) c.block_table[b * c.block_table_stride + p] = ids[next++];
    for (int t = 0; t < len; ++t) {
      const int page = c.block_table[b * c.block_table_stride + t / layout.page_size];
      for (int h = 0; h < layout.n_kv_heads; ++h)
        for (int d = 0; d < layout.head_dim; ++d) {
          const int64_t i = layout.offset(page, h, t % layout.page_size, d);
          store_kv(c.k, layout.dtype, i, nd(rng), c.k_scale);
          store_kv(c.v, layout.dtype, i, nd(rng), c.v_scale);
        }
    }
  }
  return c;
}

// Activations: n random values rounded to the act dtype; raw bytes for the device, floats for the twin.
struct HostActs {
  std::vector<uint8_t> raw;
  std::vector<float> values;
};

inline float act_value(const uint8_t* raw, ActDtype t, int64_t i) {
  if (t == ActDtype::kFp32) {
    float f;
    std::memcpy(&f, raw + 4 * i, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, raw + 2 * i, 2);
  return t == ActDtype::kBf16 ? bf16_to_f32(b) : fp16_to_f32(b);
}

inline HostActs make_acts(std::mt19937_64& rng, ActDtype t, int64_t n, float stddev) {
  HostActs a;
  a.raw.resize(size_t(n) * act_dtype_bytes(t));
  a.values.resize(size_t(n));
  std::normal_distribution<float> nd(0.f, stddev);
  for (int64_t i = 0; i < n; ++i) {
    const float x = nd(rng);
    if (t == ActDtype::kFp32) {
      std::memcpy(&a.raw[4 * i], &x, 4);
    } else {
      const uint16_t b = t == ActDtype::kBf16 ? f32_to_bf16(x) : f32_to_fp16(x);
      std::memcpy(&a.raw[2 * i], &b, 2);
    }
    a.values[i] = act_value(a.raw.data(), t, i);
  }
  return a;
}

// ||out - ref|| / ||ref||; NaN anywhere in out gives NaN (which fails every bound).
inline double normalised_error(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(out[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

// Bound on the normalised error from rounding the output to the act dtype plus fp32 arithmetic.
inline double error_bound(ActDtype t) {
  switch (t) {
    case ActDtype::kBf16: return 4e-3;   // bf16 rounding alone is about 1.2e-3
    case ActDtype::kFp16: return 1e-3;   // fp16 rounding alone is about 1.5e-4
    default: return 5e-5;
  }
}

}  // namespace soartune::kernels::test
