// Every prefill attention variant (KV dtype x head_dim x GQA group x page size x query block x tensor cores
// or SIMT) against the
// CPU twin on fresh random inputs: a batch of chunks, some fresh prompts, some continuing a cached prefix,
// lengths that are not multiples of the page size or the block; outputs poisoned before each run.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/attention_prefill.cuh"
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
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU on this machine: prefill attention kernels not run"

struct Case {
  KvCacheDtype kv;
  int head_dim;
  int n_kv_heads;
  int group;
  int page_size;
  ActDtype act = ActDtype::kBf16;
  std::vector<int> prefix_lens;
  std::vector<int> q_lens;
};

double check_case(const Case& c, const std::vector<int>& blocks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int batch = static_cast<int>(c.q_lens.size());
  const int n_heads = c.n_kv_heads * c.group;
  const int d_n = c.head_dim;
  std::vector<int> kv_lens(batch), q_offsets(batch + 1, 0);
  int max_q = 0;
  for (int b = 0; b < batch; ++b) {
    kv_lens[b] = c.prefix_lens[b] + c.q_lens[b];
    q_offsets[b + 1] = q_offsets[b] + c.q_lens[b];
    max_q = std::max(max_q, c.q_lens[b]);
  }
  const int total_q = q_offsets[batch];
  PagedKvLayout layout{c.n_kv_heads, d_n, c.page_size, c.kv};
  HostPagedCache cache = test::make_paged_cache(rng, layout, kv_lens);
  test::HostActs q = test::make_acts(rng, c.act, int64_t(total_q) * n_heads * d_n, 2.f);
  std::vector<float> ref(q.values.size());
  prefill_attention_ref(q.values.data(), cache.view(), cache.block_table.data(), cache.block_table_stride,
                        q_offsets.data(), c.prefix_lens.data(), batch, n_heads, 0.f, ref.data());

  DeviceBuf dq(q.raw.size()), dk(cache.k.size()), dv(cache.v.size());
  DeviceBuf dbt(cache.block_table.size() * 4), doff(q_offsets.size() * 4), dpre(c.prefix_lens.size() * 4);
  const size_t out_bytes = q.values.size() * act_dtype_bytes(c.act);
  DeviceBuf dout(out_bytes);
  upload(dq, q.raw);
  upload(dk, cache.k);
  upload(dv, cache.v);
  upload(dbt, cache.block_table);
  upload(doff, q_offsets);
  upload(dpre, c.prefix_lens);

  PrefillAttentionArgs a;
  a.q = dq.p;
  a.out = dout.p;
  a.k_cache = dk.p;
  a.v_cache = dv.p;
  a.block_table = static_cast<const int32_t*>(dbt.p);
  a.q_offsets = static_cast<const int32_t*>(doff.p);
  a.prefix_lens = static_cast<const int32_t*>(dpre.p);
  a.batch = batch;
  a.n_heads = n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = d_n;
  a.page_size = c.page_size;
  a.block_table_stride = cache.block_table_stride;
  a.max_q_len = max_q;
  a.kv_dtype = c.kv;
  a.act_dtype = c.act;
  a.k_scale = cache.k_scale;
  a.v_scale = cache.v_scale;

  double worst = 0;
  for (int bm : blocks) {
    for (bool tensor_cores : {true, false}) {
      PrefillAttentionPlan plan;
      const std::string err = prefill_attention_plan(a, bm, &plan, tensor_cores);
      if (!err.empty()) throw std::runtime_error("plan: " + err);
      if (tensor_cores && !plan.tensor_cores) continue;  // head_dim 256: SIMT only
      // Tensor cores round q and P to the MMA type: bf16 operands land between 1e-3 and 1e-2, fp16 lower.
      double bound = test::error_bound(c.act);
      if (plan.tensor_cores) bound = std::max(bound, c.kv == KvCacheDtype::kBf16 ? 1e-2 : 2e-3);
      std::vector<uint8_t> first;
      for (int rep = 0; rep < 2; ++rep) {
        CUDA_CHECK(cudaMemset(dout.p, 0xff, out_bytes));  // NaN in every act dtype
        CUDA_CHECK(prefill_attention_run(a, plan, nullptr));
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<uint8_t> raw(out_bytes);
        CUDA_CHECK(cudaMemcpy(raw.data(), dout.p, out_bytes, cudaMemcpyDeviceToHost));
        if (rep == 0) {
          first = raw;
          std::vector<float> out(ref.size());
          for (size_t i = 0; i < out.size(); ++i) out[i] = test::act_value(raw.data(), c.act, int64_t(i));
          const double e = test::normalised_error(out, ref);
          EXPECT_LE(e, bound) << kv_dtype_name(c.kv) << " head_dim " << d_n << " group " << c.group << " page "
                              << c.page_size << " block_m " << bm << " tensor_cores " << plan.tensor_cores
                              << " act " << int(c.act) << " seed " << seed;
          worst = std::max(worst, std::isnan(e) ? 1e30 : e);
        } else {
          EXPECT_EQ(first, raw) << "two runs on the same inputs differ (race?) block_m " << bm << " seed " << seed;
        }
      }
    }
  }
  return worst;
}

TEST(PrefillAttention, EveryVariantMatchesTwin) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  double worst = 0;
  int cases = 0;
  for (KvCacheDtype kv : {KvCacheDtype::kBf16, KvCacheDtype::kFp16, KvCacheDtype::kFp8E4M3, KvCacheDtype::kFp8E5M2})
    for (int d : {64, 128, 256})
      for (int page : {8, 16, 128}) {
        const int group = (cases % 3 == 0) ? 1 : (cases % 3 == 1 ? 4 : 3);
        // fresh prompts of 1, 77 and 160 tokens; chunks continuing 40 and 129 cached tokens
        Case c{kv, d, 2, group, page, ActDtype::kBf16, {0, 0, 40, 129, 0}, {1, 77, 33, 100, 160}};
        worst = std::max(worst, check_case(c, {32, 64, 128}, seed + cases++));
      }
  std::printf("%d cases, worst normalised error %.3g\n", cases, worst);
}

TEST(PrefillAttention, ActDtypesAndWideGroup) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (ActDtype act : {ActDtype::kBf16, ActDtype::kFp16, ActDtype::kFp32}) {
    check_case({KvCacheDtype::kBf16, 128, 1, 8, 16, act, {0, 300}, {257, 64}}, {64, 128}, seed + int(act));
    check_case({KvCacheDtype::kFp8E5M2, 64, 2, 2, 32, act, {17}, {200}}, {32}, seed + 10 + int(act));
  }
}

TEST(PrefillAttention, RejectsWhatItCannotRun) {
  PrefillAttentionArgs a;
  alignas(16) int32_t dummy[4] = {};
  a.q = a.k_cache = a.v_cache = dummy;
  a.out = dummy;
  a.block_table = a.q_offsets = a.prefix_lens = dummy;
  a.batch = 1;
  a.n_heads = 8;
  a.n_kv_heads = 2;
  a.head_dim = 128;
  a.page_size = 16;
  a.block_table_stride = 4;
  a.max_q_len = 64;
  EXPECT_EQ(prefill_attention_can_implement(a), "");
  PrefillAttentionPlan plan;
  EXPECT_NE(prefill_attention_plan(a, 48, &plan).find("prefill_attn_block"), std::string::npos);
  EXPECT_EQ(prefill_attention_plan(a, 64, &plan), "");
  EXPECT_EQ(plan.grid_x, 1);
  a.head_dim = 80;
  EXPECT_NE(prefill_attention_can_implement(a).find("head_dim"), std::string::npos);
  a.head_dim = 128;
  a.k_cache = reinterpret_cast<const char*>(dummy) + 2;
  EXPECT_NE(prefill_attention_can_implement(a).find("aligned"), std::string::npos);
}

}  // namespace
}  // namespace soartune::kernels
