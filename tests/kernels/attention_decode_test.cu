// Every decode attention variant (KV dtype x head_dim x GQA group x page size x KV splits) against the CPU
// twin on fresh random inputs, outputs poisoned before each run, unused cache slots holding NaN.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/attention_decode.cuh"
#include "kernels/attention_ref.h"
#include "tests/kernels/attention_device_util.cuh"
#include "tests/kernels/attention_test_util.h"

namespace soartune::kernels {
namespace {

using test::HostPagedCache;

using test::DeviceBuf;
using test::have_gpu;
using test::upload;

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU on this machine: decode attention kernels not run"

int sm_count() {
  int dev = 0, n = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

struct Case {
  KvCacheDtype kv;
  int head_dim;
  int n_kv_heads;
  int group;
  int page_size;
  ActDtype act = ActDtype::kBf16;
  std::vector<int> seq_lens;
};

// Worst normalised error seen per variant (SIMT, tensor cores, tensor cores one slice ahead).
double g_worst[3] = {0, 0, 0};

// Builds the inputs once and checks every split count of every variant against one reference. Returns the
// worst error.
double check_case(const Case& c, const std::vector<int>& splits_list, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int batch = static_cast<int>(c.seq_lens.size());
  const int n_heads = c.n_kv_heads * c.group;
  const int d_n = c.head_dim;
  PagedKvLayout layout{c.n_kv_heads, d_n, c.page_size, c.kv};
  HostPagedCache cache = test::make_paged_cache(rng, layout, c.seq_lens);
  // q padded to a stride of n_heads * d_n + 8 elements per sequence (a fused qkv buffer's shape).
  const int64_t q_stride = int64_t(n_heads) * d_n + 8;
  test::HostActs q = test::make_acts(rng, c.act, batch * q_stride, 2.f);
  std::vector<float> q_dense(size_t(batch) * n_heads * d_n);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < n_heads * d_n; ++i) q_dense[size_t(b) * n_heads * d_n + i] = q.values[b * q_stride + i];
  std::vector<float> ref(q_dense.size());
  decode_attention_ref(q_dense.data(), cache.view(), cache.block_table.data(), cache.block_table_stride,
                       c.seq_lens.data(), batch, n_heads, 0.f, ref.data());

  DeviceBuf dq(q.raw.size()), dk(cache.k.size()), dv(cache.v.size());
  DeviceBuf dbt(cache.block_table.size() * 4), dlen(c.seq_lens.size() * 4);
  const size_t out_bytes = q_dense.size() * act_dtype_bytes(c.act);
  DeviceBuf dout(out_bytes);
  upload(dq, q.raw);
  upload(dk, cache.k);
  upload(dv, cache.v);
  upload(dbt, cache.block_table);
  upload(dlen, c.seq_lens);

  DecodeAttentionArgs a;
  a.q = dq.p;
  a.out = dout.p;
  a.k_cache = dk.p;
  a.v_cache = dv.p;
  a.block_table = static_cast<const int32_t*>(dbt.p);
  a.seq_lens = static_cast<const int32_t*>(dlen.p);
  a.batch = batch;
  a.n_heads = n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = d_n;
  a.page_size = c.page_size;
  a.block_table_stride = cache.block_table_stride;
  a.max_seq_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  a.q_stride = q_stride;
  a.kv_dtype = c.kv;
  a.act_dtype = c.act;
  a.k_scale = cache.k_scale;
  a.v_scale = cache.v_scale;

  double worst = 0;
  // Variants: SIMT, tensor cores, tensor cores loading one slice ahead (the last two for head_dim 64 / 128).
  for (int variant = 0; variant < 3; ++variant)
  for (int splits : splits_list) {
    DecodeAttentionPlan plan;
    const std::string err = decode_attention_plan(a, splits, sm_count(), &plan, variant > 0);
    if (!err.empty()) throw std::runtime_error("plan: " + err);
    if (variant > 0 && !plan.tensor_cores) {
      EXPECT_EQ(c.head_dim, 256) << "the tensor-core variant must serve head_dim 64 and 128";
      continue;
    }
    if (variant > 0) EXPECT_TRUE(plan.mma_ahead) << "the plan's default for tensor cores";
    plan.mma_ahead = variant == 2;
    // q and P are rounded to the MMA's 16-bit type on the tensor-core path (as in prefill attention).
    double bound = test::error_bound(c.act);
    if (plan.tensor_cores) bound = std::max(bound, c.kv == KvCacheDtype::kBf16 ? 1e-2 : 2e-3);
    DeviceBuf ws(plan.workspace_bytes);
    CUDA_CHECK(cudaMemset(ws.p, 0xff, plan.workspace_bytes ? plan.workspace_bytes : 16));
    std::vector<uint8_t> first;
    for (int rep = 0; rep < 2; ++rep) {
      CUDA_CHECK(cudaMemset(dout.p, 0xff, out_bytes));  // NaN in every act dtype
      CUDA_CHECK(decode_attention_run(a, plan, ws.p, nullptr));
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint8_t> raw(out_bytes);
      CUDA_CHECK(cudaMemcpy(raw.data(), dout.p, out_bytes, cudaMemcpyDeviceToHost));
      if (rep == 0) {
        first = raw;
        std::vector<float> out(q_dense.size());
        for (size_t i = 0; i < out.size(); ++i) out[i] = test::act_value(raw.data(), c.act, int64_t(i));
        const double e = test::normalised_error(out, ref);
        EXPECT_LE(e, bound) << kv_dtype_name(c.kv) << " head_dim " << d_n << " group " << c.group << " page "
                            << c.page_size << " splits " << splits << " (planned " << plan.kv_splits << ") act "
                            << int(c.act) << " tensor_cores " << plan.tensor_cores << " ahead " << plan.mma_ahead
                            << " seed " << seed;
        worst = std::max(worst, std::isnan(e) ? 1e30 : e);
        g_worst[variant] = std::max(g_worst[variant], std::isnan(e) ? 1e30 : e);
      } else {
        EXPECT_EQ(first, raw) << "two runs on the same inputs differ (race?) splits " << splits << " seed " << seed;
      }
    }
  }
  return worst;
}

TEST(DecodeAttention, EveryVariantMatchesTwin) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::vector<int> splits_list = {0, 1, 2, 4, 8, 32, 128};
  double worst = 0;
  int cases = 0;
  for (KvCacheDtype kv : {KvCacheDtype::kBf16, KvCacheDtype::kFp16, KvCacheDtype::kFp8E4M3, KvCacheDtype::kFp8E5M2})
    for (int d : {64, 128, 256})
      for (int group : {1, 3, 4, 8})
        for (int page : {8, 16, 24, 128}) {
          Case c{kv, d, 2, group, page, ActDtype::kBf16, {1, 77, 300, 16 * 17, 1031}};
          worst = std::max(worst, check_case(c, splits_list, seed + cases++));
        }
  std::printf("%d cases, worst normalised error %.3g (SIMT %.3g, tensor cores %.3g, one slice ahead %.3g)\n", cases,
              worst, g_worst[0], g_worst[1], g_worst[2]);
}

TEST(DecodeAttention, LargeGroupAndActDtypes) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (ActDtype act : {ActDtype::kBf16, ActDtype::kFp16, ActDtype::kFp32}) {
    // group 12 is served by two CTAs per KV head (8 + 4 heads)
    check_case({KvCacheDtype::kBf16, 128, 2, 12, 16, act, {5, 200, 2048}}, {0, 1, 4}, seed + int(act));
    check_case({KvCacheDtype::kFp8E4M3, 64, 4, 2, 32, act, {33, 64, 4097}}, {0, 16}, seed + 10 + int(act));
  }
}

TEST(DecodeAttention, EmptySequenceGivesZeros) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  for (int splits : {1, 4}) {
    // the padding slot (seq_len 0) must come out as zeros, not NaN; check_case compares with the twin's zeros
    Case c{KvCacheDtype::kBf16, 128, 1, 4, 16, ActDtype::kFp32, {0, 50}};
    // check_case holds each variant to its own bound; the loosest of them (tensor cores, bf16) caps all
    EXPECT_LE(check_case(c, {splits}, seed), 1e-2);
  }
}

TEST(DecodeAttention, RejectsWhatItCannotRun) {
  DecodeAttentionArgs a;
  alignas(16) int32_t dummy[4] = {};
  a.q = a.k_cache = a.v_cache = dummy;
  a.out = dummy;
  a.block_table = a.seq_lens = dummy;
  a.batch = 1;
  a.n_heads = 8;
  a.n_kv_heads = 2;
  a.head_dim = 128;
  a.page_size = 16;
  a.block_table_stride = 4;
  a.max_seq_len = 64;
  EXPECT_EQ(decode_attention_can_implement(a), "");
  DecodeAttentionPlan plan;
  EXPECT_NE(decode_attention_plan(a, 3, 132, &plan).find("decode_kv_splits"), std::string::npos);
  EXPECT_EQ(decode_attention_plan(a, 0, 132, &plan), "");
  EXPECT_GE(plan.kv_splits, 1);
  a.head_dim = 96;
  EXPECT_NE(decode_attention_can_implement(a).find("head_dim"), std::string::npos);
  a.head_dim = 128;
  a.n_heads = 7;
  EXPECT_NE(decode_attention_can_implement(a).find("n_heads"), std::string::npos);
  a.n_heads = 8;
  a.page_size = 0;
  EXPECT_NE(decode_attention_can_implement(a).find("page_size"), std::string::npos);
}

}  // namespace
}  // namespace soartune::kernels
