// Timing of InfLLM-v2 sparse attention (kernels/sparse_attention.cuh) against the dense paged kernels
// (attention_decode / attention_prefill) on one MiniCPM-SALA softmax layer: 32 query heads, 2 KV heads,
// head_dim 128, bf16 KV, page 16, the release sparse_config (block 64, kernel 32 / stride 16, init 1 block,
// top-k 64, window 2048, dense_len 8192), a 60000-token context. Not a test: prints a table.
//   decode: one step at batch 1 and 8 (each sequence 60000 tokens cached + the new one);
//   prefill: the last 4096 tokens of the 60000 (prefix 55904), batch 1.
// The compressed keys are built by running the sparse path itself over the contexts first (chunks of 4096),
// so the timed step finds its slots as a serving engine would. CUDA events, median of N runs.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/sparse_attention.cuh"
#include "tests/kernels/timing_support.cuh"

using namespace soartune::kernels;
using namespace soartune::kernels::timing;

// Random bf16 values: normal(0, 1) rounded, one 16 MiB block repeated over the buffer.
void fill_normal_bf16(void* p, size_t bytes, uint64_t seed) {
  fill_bf16(p, bytes / 2, std::normal_distribution<float>(0.f, 1.f), seed);
}

struct Layer {
  int batch = 0, ctx = 0, pages_per_seq = 0;
  void *k = nullptr, *v = nullptr;
  int32_t* bt = nullptr;
  float* ck = nullptr;
  int32_t* slots = nullptr;
  int cap = 0;
};

constexpr int kHeads = 32, kKv = 2, kD = 128, kPage = 16;

// The layer's cache as the paged-attention args take it, with q and out of one call.
PagedLayer paged(const Layer& L, const void* q, void* out) {
  return {.q = q, .out = out, .k_cache = L.k, .v_cache = L.v, .block_table = L.bt, .batch = L.batch,
          .n_heads = kHeads, .n_kv_heads = kKv, .head_dim = kD, .page_size = kPage,
          .block_table_stride = L.pages_per_seq};
}

// One sparse call over tokens [start, start + q_len) of every sequence; returns the plan (workspace kept).
struct SparseCall {
  SparseAttentionArgs a;
  SparseAttentionPlan plan;
  void *q = nullptr, *out = nullptr, *ws = nullptr;
  int32_t *offs = nullptr, *pre = nullptr;
  void free_all() {
    cudaFree(q);
    cudaFree(out);
    cudaFree(ws);
    cudaFree(offs);
    cudaFree(pre);
  }
};

SparseCall make_call(const Layer& L, const SparseParams& sp, int start, int q_len, int sms, uint64_t seed) {
  SparseCall c;
  std::vector<int32_t> offs(L.batch + 1), pre(L.batch, start);
  for (int b = 0; b <= L.batch; ++b) offs[b] = b * q_len;
  c.offs = dev_copy(offs);
  c.pre = dev_copy(pre);
  const size_t qb = size_t(L.batch) * q_len * kHeads * kD * 2;
  CK(cudaMalloc(&c.q, qb));
  CK(cudaMalloc(&c.out, qb));
  fill_normal_bf16(c.q, qb, seed);
  c.a = paged_attention_args<SparseAttentionArgs>(paged(L, c.q, c.out));
  c.a.ck = L.ck;
  c.a.ck_slots = L.slots;
  c.a.ck_capacity = L.cap;
  c.a.max_context = L.ctx;
  c.a.sp = sp;
  c.a.q_offsets = c.offs;
  c.a.prefix_lens = c.pre;
  c.a.total_q = L.batch * q_len;
  c.a.max_q_len = q_len;
  const std::string err = sparse_attention_plan(c.a, sms, 0, &c.plan);
  if (!err.empty()) {
    std::fprintf(stderr, "sparse_attention_plan: %s\n", err.c_str());
    std::exit(1);
  }
  CK(cudaMalloc(&c.ws, c.plan.workspace_bytes));
  return c;
}

Layer make_layer(int batch, int ctx, const SparseParams& sp, int sms) {
  Layer L;
  L.batch = batch;
  L.ctx = ctx;
  L.pages_per_seq = (ctx + kPage - 1) / kPage;
  const size_t pages = size_t(batch) * L.pages_per_seq;
  const size_t bytes = pages * kKv * kPage * kD * 2;
  CK(cudaMalloc(&L.k, bytes));
  CK(cudaMalloc(&L.v, bytes));
  fill_normal_bf16(L.k, bytes, 11);
  fill_normal_bf16(L.v, bytes, 12);
  std::vector<int32_t> bt(pages);
  for (size_t i = 0; i < pages; ++i) bt[i] = int32_t(i);
  std::shuffle(bt.begin(), bt.end(), std::mt19937_64(13));
  L.bt = dev_copy(bt);
  L.cap = sparse_compressed_keys(ctx, sp);
  CK(cudaMalloc(&L.ck, size_t(batch) * kKv * L.cap * kD * 4));
  std::vector<int32_t> slots(batch);
  for (int b = 0; b < batch; ++b) slots[b] = b;
  L.slots = dev_copy(slots);
  return L;
}

// Builds the compressed keys of tokens [0, upto) by running the sparse path over them in chunks.
void warm_ck(const Layer& L, const SparseParams& sp, int upto, int sms) {
  const int chunk = 4096;
  for (int start = 0; start < upto; start += chunk) {
    SparseCall c = make_call(L, sp, start, std::min(chunk, upto - start), sms, 21);
    CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr));
    CK(cudaDeviceSynchronize());
    c.free_all();
  }
}

// The sparse call timed whole, then its selection (compression + scores + top-k), the scores and the top-k
// kernels each alone, and its attention alone.
struct SparseTimes {
  float whole_ms, select_ms, scores_ms, topk_ms, attend_ms;
};

SparseTimes time_sparse(const SparseCall& c, int reps) {
  SparseTimes t;
  t.whole_ms = median_ms([&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr)); }, reps);
  constexpr int kSelection = kSparseCompress | kSparseScores | kSparseSelect;
  t.select_ms = median_ms([&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr, kSelection)); }, reps);
  t.scores_ms = median_ms([&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr, kSparseScores)); }, reps);
  t.topk_ms = median_ms([&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr, kSparseSelect)); }, reps);
  t.attend_ms = median_ms([&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr, kSparseAttend)); }, reps);
  return t;
}

// One row of the table: the dense kernel against the sparse call.
void print_row(const char* step, int batch, int ctx, int q_len, float dense_ms, const SparseTimes& t, int splits) {
  std::printf("%-8s %5d %7d %6d %10.4f %10.4f %8.2f %7d %10.4f %10.4f %10.4f %10.4f\n", step, batch, ctx, q_len,
              dense_ms, t.whole_ms, dense_ms / t.whole_ms, splits, t.select_ms, t.scores_ms, t.topk_ms, t.attend_ms);
}

void free_layer(Layer& L) {
  cudaFree(L.k);
  cudaFree(L.v);
  cudaFree(L.bt);
  cudaFree(L.ck);
  cudaFree(L.slots);
}

int main() {
  const int sms = print_device();
  SparseParams sp;   // the release sparse_config
  sp.block_size = 64;
  sp.dense_len = 8192;
  sp.init_blocks = 1;
  sp.kernel_size = 32;
  sp.kernel_stride = 16;
  sp.topk = 64;
  sp.window_size = 2048;
  const int ctx = 60000;
  std::printf("one softmax layer: %d query heads, %d KV heads, head_dim %d, bf16 KV, page %d; sparse: block %d, "
              "top-k %d, window %d, dense_len %d -> %d of %d blocks\n\n",
              kHeads, kKv, kD, kPage, sp.block_size, sp.topk, sp.window_size, sp.dense_len, sp.keep(),
              sparse_max_blocks(ctx, sp.block_size));
  std::printf("%-8s %5s %7s %6s %10s %10s %8s %7s %10s %10s %10s %10s\n", "step", "batch", "context", "q_len",
              "dense_ms", "sparse_ms", "speedup", "splits", "select_ms", "scores_ms", "topk_ms", "attend_ms");
  std::printf("(sparse_ms: the whole call; select_ms: compression + scores + top-k alone; scores_ms: the two scores\n"
              " passes alone; topk_ms: the block selection kernel alone; attend_ms: attention over the chosen blocks\n"
              " alone)\n");

  for (int batch : {1, 8}) {
    Layer L = make_layer(batch, ctx, sp, sms);
    warm_ck(L, sp, ctx - 1, sms);
    // Decode: the new token at position ctx - 1 (its K/V already in the cache).
    SparseCall c = make_call(L, sp, ctx - 1, 1, sms, 31);
    const SparseTimes st = time_sparse(c, 50);
    auto d = paged_attention_args<DecodeAttentionArgs>(paged(L, c.q, c.out));
    std::vector<int32_t> lens(batch, ctx);
    int32_t* lens_d = dev_copy(lens);
    d.seq_lens = lens_d;
    d.max_seq_len = ctx;
    DecodeAttentionPlan dp;
    if (const std::string e = decode_attention_plan(d, 0, sms, &dp); !e.empty()) {
      std::fprintf(stderr, "decode_attention_plan: %s\n", e.c_str());
      return 1;
    }
    void* dws = nullptr;
    if (dp.workspace_bytes) CK(cudaMalloc(&dws, dp.workspace_bytes));
    const float dense_ms = median_ms([&] { CK(decode_attention_run(d, dp, dws, nullptr)); }, 50);
    print_row("decode", batch, ctx, 1, dense_ms, st, c.plan.splits);
    std::fflush(stdout);
    cudaFree(dws);
    cudaFree(lens_d);
    c.free_all();
    free_layer(L);
  }

  {
    const int q_len = 4096, prefix = ctx - q_len;
    Layer L = make_layer(1, ctx, sp, sms);
    warm_ck(L, sp, prefix, sms);
    SparseCall c = make_call(L, sp, prefix, q_len, sms, 41);
    const SparseTimes st = time_sparse(c, 10);
    auto pa = paged_attention_args<PrefillAttentionArgs>(paged(L, c.q, c.out));
    pa.q_offsets = c.offs;
    pa.prefix_lens = c.pre;
    pa.max_q_len = q_len;
    float dense_ms = 1e30f;
    for (int bm : {64, 128}) {
      PrefillAttentionPlan pp;
      if (const std::string e = prefill_attention_plan(pa, bm, &pp); !e.empty()) {
        std::fprintf(stderr, "prefill_attention_plan: %s\n", e.c_str());
        return 1;
      }
      dense_ms = std::min(dense_ms, median_ms([&] { CK(prefill_attention_run(pa, pp, nullptr)); }, 10));
    }
    print_row("prefill", 1, ctx, q_len, dense_ms, st, c.plan.splits);
    std::printf("(dense prefill: the faster of prefill_attn_block 64 and 128; sparse workspace %.0f MiB)\n",
                c.plan.workspace_bytes / 1048576.0);
    c.free_all();
    free_layer(L);
  }
  return 0;
}
