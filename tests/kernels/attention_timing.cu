// Timing of the attention kernels on llama3-8b shapes (32 query heads, 8 KV heads, head_dim 128), one
// layer per launch, beside the measured copy bandwidth. Not a test: prints a table.
//   attention_timing            decode at 32k context (batch 1, 8), prefill of a 4k prompt
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "tests/kernels/timing_support.cuh"

using namespace soartune::kernels;
using namespace soartune::kernels::timing;

// Random bytes that are finite in every KV dtype (the top exponent bit cleared): one 16 MiB random block
// repeated over the buffer.
void fill_random(void* p, size_t bytes, uint64_t seed) {
  const size_t chunk = std::min(bytes, size_t(16) << 20);
  std::vector<uint8_t> h(chunk);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < chunk; ++i) h[i] = uint8_t(rng()) & 0xb7;
  upload_repeated(p, bytes, h.data(), chunk);
}

int main() {
  const int sms = print_device();
  const double copy_gbs = measure_copy_gbs();

  const int n_heads = 32, n_kv = 8, d = 128, page = 16;
  std::printf("\n%-9s %5s %6s %8s %9s %9s %9s %10s %8s\n", "kv", "batch", "ctx", "splits", "simt_us", "mma_us",
              "ahead_us", "roofline", "GB/s*");
  std::printf("(GB/s* of the fastest of the three)\n");
  for (KvCacheDtype kv : {KvCacheDtype::kBf16, KvCacheDtype::kFp16, KvCacheDtype::kFp8E4M3, KvCacheDtype::kFp8E5M2}) {
    for (int batch : {1, 8}) {
      for (int ctx : {512, 4096, 32768}) {
        const int pages_per_seq = ctx / page;
        const size_t pages = size_t(batch) * pages_per_seq;
        const size_t cache_bytes = pages * n_kv * page * d * kv_dtype_bytes(kv);
        void *k, *v, *q, *out, *bt, *lens;
        CK(cudaMalloc(&k, cache_bytes));
        CK(cudaMalloc(&v, cache_bytes));
        fill_random(k, cache_bytes, 1);
        fill_random(v, cache_bytes, 2);
        CK(cudaMalloc(&q, size_t(batch) * n_heads * d * 2));
        CK(cudaMalloc(&out, size_t(batch) * n_heads * d * 2));
        fill_random(q, size_t(batch) * n_heads * d * 2, 3);
        std::vector<int32_t> hbt(pages);
        for (size_t i = 0; i < pages; ++i) hbt[i] = int32_t(i);
        std::shuffle(hbt.begin(), hbt.end(), std::mt19937_64(4));
        std::vector<int32_t> hl(batch, ctx);
        CK(cudaMalloc(&bt, pages * 4));
        CK(cudaMalloc(&lens, batch * 4));
        CK(cudaMemcpy(bt, hbt.data(), pages * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(lens, hl.data(), batch * 4, cudaMemcpyHostToDevice));
        auto a = paged_attention_args<DecodeAttentionArgs>(
            {.q = q, .out = out, .k_cache = k, .v_cache = v, .block_table = static_cast<int32_t*>(bt), .batch = batch,
             .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = d, .page_size = page,
             .block_table_stride = pages_per_seq});
        a.seq_lens = static_cast<int32_t*>(lens);
        a.max_seq_len = ctx;
        a.kv_dtype = kv;
        for (int splits : {0, 1, 4, 8, 16, 32, 64, 128}) {
          // The three variants side by side: SIMT, tensor cores, tensor cores one slice ahead.
          float us[3];
          int planned = 0;
          for (int variant = 0; variant < 3; ++variant) {
            DecodeAttentionPlan plan;
            if (!decode_attention_plan(a, splits, sms, &plan, variant > 0).empty()) return 1;
            plan.mma_ahead = variant == 2;
            planned = plan.kv_splits;
            void* ws = nullptr;
            if (plan.workspace_bytes) CK(cudaMalloc(&ws, plan.workspace_bytes));
            us[variant] = 1e3f * median_ms([&] { CK(decode_attention_run(a, plan, ws, nullptr)); }, 30);
            if (ws) CK(cudaFree(ws));
          }
          const double bytes = 2.0 * cache_bytes;
          const float best = std::min({us[0], us[1], us[2]});
          std::printf("%-9s %5d %6d %3d(%3d) %9.1f %9.1f %9.1f %10.1f %8.0f\n", kv_dtype_name(kv), batch, ctx,
                      splits, planned, us[0], us[1], us[2], bytes / copy_gbs * 1e-3, bytes / (best * 1e-6) / 1e9);
        }
        dev_free(k, v, q, out, bt, lens);
      }
    }
  }

  // Prefill: one 4096-token prompt, causal.
  std::printf("\n%-9s %6s %7s %5s %10s %8s\n", "kv", "q_len", "block_m", "mma", "ms/layer", "TFLOP/s");
  const int q_len = 4096;
  for (KvCacheDtype kv : {KvCacheDtype::kBf16, KvCacheDtype::kFp16, KvCacheDtype::kFp8E4M3}) {
    const int pages_per_seq = q_len / page;
    const size_t cache_bytes = size_t(pages_per_seq) * n_kv * page * d * kv_dtype_bytes(kv);
    void *k, *v, *q, *out, *bt, *offs, *pre;
    CK(cudaMalloc(&k, cache_bytes));
    CK(cudaMalloc(&v, cache_bytes));
    fill_random(k, cache_bytes, 5);
    fill_random(v, cache_bytes, 6);
    const size_t qb = size_t(q_len) * n_heads * d * 2;
    CK(cudaMalloc(&q, qb));
    CK(cudaMalloc(&out, qb));
    fill_random(q, qb, 7);
    std::vector<int32_t> hbt(pages_per_seq);
    for (int i = 0; i < pages_per_seq; ++i) hbt[i] = i;
    std::vector<int32_t> ho = {0, q_len}, hp = {0};
    CK(cudaMalloc(&bt, pages_per_seq * 4));
    CK(cudaMalloc(&offs, 8));
    CK(cudaMalloc(&pre, 4));
    CK(cudaMemcpy(bt, hbt.data(), pages_per_seq * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(offs, ho.data(), 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(pre, hp.data(), 4, cudaMemcpyHostToDevice));
    auto a = paged_attention_args<PrefillAttentionArgs>(
        {.q = q, .out = out, .k_cache = k, .v_cache = v, .block_table = static_cast<int32_t*>(bt), .batch = 1,
         .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = d, .page_size = page,
         .block_table_stride = pages_per_seq});
    a.q_offsets = static_cast<int32_t*>(offs);
    a.prefix_lens = static_cast<int32_t*>(pre);
    a.max_q_len = q_len;
    a.kv_dtype = kv;
    const double flops = 4.0 * n_heads * d * (double(q_len) * (q_len + 1) / 2);
    for (bool tc : {true, false})
      for (int bm : {32, 64, 128}) {
        PrefillAttentionPlan plan;
        if (!prefill_attention_plan(a, bm, &plan, tc).empty()) return 1;
        const float ms = median_ms([&] { CK(prefill_attention_run(a, plan, nullptr)); }, 10);
        std::printf("%-9s %6d %7d %5d %10.3f %8.1f\n", kv_dtype_name(kv), q_len, bm, int(tc), ms,
                    flops / (ms * 1e-3) / 1e12);
      }
    dev_free(k, v, q, out, bt, offs, pre);
  }
  return 0;
}
