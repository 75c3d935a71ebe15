// The attention CPU twins against a naive dense attention written out here: K and V gathered from the
// pages into plain [token][kv_head][head_dim] arrays, full score matrix, causal mask, softmax in fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention_ref.h"
#include "kernels/numeric_formats.h"
#include "tests/kernels/attention_test_util.h"

namespace soartune::kernels {
namespace {

float decode_elem(const std::vector<uint8_t>& buf, KvCacheDtype t, int64_t i, float scale) {
  switch (t) {
    case KvCacheDtype::kBf16: return bf16_to_f32(uint16_t(buf[2 * i] | (buf[2 * i + 1] << 8)));
    case KvCacheDtype::kFp16: return fp16_to_f32(uint16_t(buf[2 * i] | (buf[2 * i + 1] << 8)));
    case KvCacheDtype::kFp8E4M3: return fp8_e4m3_to_f32(buf[i]) * scale;
    case KvCacheDtype::kFp8E5M2: return fp8_e5m2_to_f32(buf[i]) * scale;
  }
  return NAN;
}

// out[qi][h][d] for queries at positions pos[qi] over tokens 0..pos[qi] of dense k/v [token][kv_head][d].
std::vector<float> dense_attention(const std::vector<float>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, const std::vector<int>& pos, int n_heads,
                                   int n_kv_heads, int d_n) {
  std::vector<float> out(q.size());
  const int group = n_heads / n_kv_heads;
  const double scale = 1.0 / std::sqrt(double(d_n));
  for (size_t qi = 0; qi < pos.size(); ++qi)
    for (int h = 0; h < n_heads; ++h) {
      const int kh = h / group;
      const float* qr = &q[(qi * n_heads + h) * d_n];
      std::vector<double> s(pos[qi] + 1);
      double m = -INFINITY;
      for (int t = 0; t <= pos[qi]; ++t) {
        double dot = 0;
        for (int d = 0; d < d_n; ++d) dot += double(qr[d]) * k[(size_t(t) * n_kv_heads + kh) * d_n + d];
        s[t] = dot * scale;
        m = std::max(m, s[t]);
      }
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (int d = 0; d < d_n; ++d) {
        double o = 0;
        for (int t = 0; t <= pos[qi]; ++t) o += s[t] * v[(size_t(t) * n_kv_heads + kh) * d_n + d];
        out[(qi * n_heads + h) * d_n + d] = float(o / l);
      }
    }
  return out;
}

struct Dense {
  std::vector<double> k, v;
};

Dense gather(const test::HostPagedCache& c, int seq, int len) {
  const PagedKvLayout& L = c.layout;
  Dense out;
  out.k.resize(size_t(len) * L.n_kv_heads * L.head_dim);
  out.v.resize(out.k.size());
  for (int t = 0; t < len; ++t) {
    const int page = c.block_table[size_t(seq) * c.block_table_stride + t / L.page_size];
    for (int h = 0; h < L.n_kv_heads; ++h)
      for (int d = 0; d < L.head_dim; ++d) {
        const int64_t i = L.offset(page, h, t % L.page_size, d);
        out.k[(size_t(t) * L.n_kv_heads + h) * L.head_dim + d] = decode_elem(c.k, L.dtype, i, c.k_scale);
        out.v[(size_t(t) * L.n_kv_heads + h) * L.head_dim + d] = decode_elem(c.v, L.dtype, i, c.v_scale);
      }
  }
  return out;
}

TEST(AttentionRef, DecodeMatchesDenseAttention) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (KvCacheDtype kv : {KvCacheDtype::kBf16, KvCacheDtype::kFp16, KvCacheDtype::kFp8E4M3, KvCacheDtype::kFp8E5M2}) {
    const int n_kv = 2, group = 3, n_heads = n_kv * group, d_n = 64;
    const std::vector<int> lens = {1, 37, 100};
    PagedKvLayout layout{n_kv, d_n, 16, kv};
    test::HostPagedCache c = test::make_paged_cache(rng, layout, lens);
    test::HostActs q = test::make_acts(rng, ActDtype::kFp32, int64_t(lens.size()) * n_heads * d_n, 2.f);
    std::vector<float> out(q.values.size());
    decode_attention_ref(q.values.data(), c.view(), c.block_table.data(), c.block_table_stride, lens.data(),
                         int(lens.size()), n_heads, 0.f, out.data());
    for (size_t b = 0; b < lens.size(); ++b) {
      Dense dense = gather(c, int(b), lens[b]);
      std::vector<float> qb(q.values.begin() + b * n_heads * d_n, q.values.begin() + (b + 1) * n_heads * d_n);
      std::vector<float> want = dense_attention(qb, dense.k, dense.v, {lens[b] - 1}, n_heads, n_kv, d_n);
      std::vector<float> got(out.begin() + b * n_heads * d_n, out.begin() + (b + 1) * n_heads * d_n);
      EXPECT_LE(test::normalised_error(got, want), 1e-5) << kv_dtype_name(kv) << " seq " << b << " seed " << seed;
    }
  }
}

TEST(AttentionRef, PrefillMatchesDenseAttentionAndDecode) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int n_kv = 2, group = 2, n_heads = n_kv * group, d_n = 32;
  const std::vector<int> prefix = {0, 21}, q_lens = {13, 30};
  const std::vector<int> kv_lens = {13, 51}, q_offsets = {0, 13, 43};
  PagedKvLayout layout{n_kv, d_n, 8, KvCacheDtype::kBf16};
  test::HostPagedCache c = test::make_paged_cache(rng, layout, kv_lens);
  test::HostActs q = test::make_acts(rng, ActDtype::kFp32, int64_t(43) * n_heads * d_n, 2.f);
  std::vector<float> out(q.values.size());
  prefill_attention_ref(q.values.data(), c.view(), c.block_table.data(), c.block_table_stride, q_offsets.data(),
                        prefix.data(), 2, n_heads, 0.f, out.data());
  for (int b = 0; b < 2; ++b) {
    Dense dense = gather(c, b, kv_lens[b]);
    std::vector<int> pos;
    for (int j = 0; j < q_lens[b]; ++j) pos.push_back(prefix[b] + j);
    const size_t row = size_t(n_heads) * d_n;
    std::vector<float> qb(q.values.begin() + q_offsets[b] * row, q.values.begin() + q_offsets[b + 1] * row);
    std::vector<float> want = dense_attention(qb, dense.k, dense.v, pos, n_heads, n_kv, d_n);
    std::vector<float> got(out.begin() + q_offsets[b] * row, out.begin() + q_offsets[b + 1] * row);
    EXPECT_LE(test::normalised_error(got, want), 1e-5) << "seq " << b << " seed " << seed;
  }
  // The last query of sequence 1 is a decode step at seq_len 51.
  const size_t row = size_t(n_heads) * d_n;
  std::vector<float> dec(row);
  const int len = 51;
  decode_attention_ref(&q.values[42 * row], c.view(), c.block_table.data() + c.block_table_stride,
                       c.block_table_stride, &len, 1, n_heads, 0.f, dec.data());
  for (size_t i = 0; i < row; ++i) EXPECT_FLOAT_EQ(dec[i], out[42 * row + i]);
}

}  // namespace
}  // namespace soartune::kernels
