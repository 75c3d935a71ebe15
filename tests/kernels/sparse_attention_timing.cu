// Timing of InfLLM-v2 sparse attention (kernels/sparse_attention.cuh) against the dense paged kernels
// (attention_decode / attention_prefill) on one MiniCPM-SALA softmax layer: 32 query heads, 2 KV heads,
// head_dim 128, bf16 KV, page 16, the release sparse_config (block 64, kernel 32 / stride 16, init 1 block,
// top-k 64, window 2048, dense_len 8192), a 60000-token context. Not a test: prints a table.
//   decode: one step at batch 1 and 8 (each sequence 60000 tokens cached + the new one);
//   prefill: the last 4096 tokens of the 60000 (prefix 55904), batch 1.
// The compressed keys are built by running the sparse path itself over the contexts first (chunks of 4096),
// so the timed step finds its slots as a serving engine would. CUDA events, median of N runs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/sparse_attention.cuh"

using namespace soartune::kernels;

#define CK(stmt)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (stmt);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #stmt, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

template <typename F>
float median_ms(F&& f, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Random bf16 values: normal(0, 1) rounded, one 16 MiB block repeated over the buffer.
void fill_bf16(void* p, size_t bytes, uint64_t seed) {
  const size_t chunk = std::min(bytes, size_t(16) << 20);
  std::vector<uint16_t> h(chunk / 2);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : h) {
    const float f = nd(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  }
  for (size_t off = 0; off < bytes; off += chunk)
    CK(cudaMemcpy(static_cast<char*>(p) + off, h.data(), std::min(chunk, bytes - off), cudaMemcpyHostToDevice));
}

template <typename T>
T* dev_copy(const std::vector<T>& h) {
  T* d;
  CK(cudaMalloc(&d, std::max<size_t>(h.size() * sizeof(T), 16)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
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

SparseAttentionArgs sparse_args(const Layer& L, const SparseParams& sp) {
  SparseAttentionArgs a;
  a.k_cache = L.k;
  a.v_cache = L.v;
  a.block_table = L.bt;
  a.ck = L.ck;
  a.ck_slots = L.slots;
  a.ck_capacity = L.cap;
  a.batch = L.batch;
  a.max_context = L.ctx;
  a.n_heads = kHeads;
  a.n_kv_heads = kKv;
  a.head_dim = kD;
  a.page_size = kPage;
  a.block_table_stride = L.pages_per_seq;
  a.sp = sp;
  return a;
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
  c.a = sparse_args(L, sp);
  std::vector<int32_t> offs(L.batch + 1), pre(L.batch, start);
  for (int b = 0; b <= L.batch; ++b) offs[b] = b * q_len;
  c.offs = dev_copy(offs);
  c.pre = dev_copy(pre);
  const size_t qb = size_t(L.batch) * q_len * kHeads * kD * 2;
  CK(cudaMalloc(&c.q, qb));
  CK(cudaMalloc(&c.out, qb));
  fill_bf16(c.q, qb, seed);
  c.a.q = c.q;
  c.a.out = c.out;
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
  fill_bf16(L.k, bytes, 11);
  fill_bf16(L.v, bytes, 12);
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

void free_layer(Layer& L) {
  cudaFree(L.k);
  cudaFree(L.v);
  cudaFree(L.bt);
  cudaFree(L.ck);
  cudaFree(L.slots);
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %s, %d SMs\n", prop.name, sms);
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
  std::printf("%-8s %5s %7s %6s %10s %10s %8s %7s %10s %10s\n", "step", "batch", "context", "q_len", "dense_ms",
              "sparse_ms", "speedup", "splits", "select_ms", "attend_ms");
  std::printf("(sparse_ms: the whole call; select_ms: compression + scores + top-k alone; attend_ms: attention over the\n"
              " chosen blocks alone)\n");

  for (int batch : {1, 8}) {
    Layer L = make_layer(batch, ctx, sp, sms);
    warm_ck(L, sp, ctx - 1, sms);
    // Decode: the new token at position ctx - 1 (its K/V already in the cache).
    SparseCall c = make_call(L, sp, ctx - 1, 1, sms, 31);
    const float sparse_ms = median_ms([&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr)); }, 50);
    const float select_ms = median_ms(
        [&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr, kSparseCompress | kSparseScores | kSparseSelect)); }, 50);
    const float attend_ms = median_ms([&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr, kSparseAttend)); }, 50);
    DecodeAttentionArgs d;
    d.q = c.q;
    d.out = c.out;
    d.k_cache = L.k;
    d.v_cache = L.v;
    d.block_table = L.bt;
    std::vector<int32_t> lens(batch, ctx);
    int32_t* lens_d = dev_copy(lens);
    d.seq_lens = lens_d;
    d.batch = batch;
    d.n_heads = kHeads;
    d.n_kv_heads = kKv;
    d.head_dim = kD;
    d.page_size = kPage;
    d.block_table_stride = L.pages_per_seq;
    d.max_seq_len = ctx;
    DecodeAttentionPlan dp;
    if (const std::string e = decode_attention_plan(d, 0, sms, &dp); !e.empty()) {
      std::fprintf(stderr, "decode_attention_plan: %s\n", e.c_str());
      return 1;
    }
    void* dws = nullptr;
    if (dp.workspace_bytes) CK(cudaMalloc(&dws, dp.workspace_bytes));
    const float dense_ms = median_ms([&] { CK(decode_attention_run(d, dp, dws, nullptr)); }, 50);
    std::printf("%-8s %5d %7d %6d %10.4f %10.4f %8.2f %7d %10.4f %10.4f\n", "decode", batch, ctx, 1, dense_ms,
                sparse_ms, dense_ms / sparse_ms, c.plan.splits, select_ms, attend_ms);
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
    const float sparse_ms = median_ms([&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr)); }, 10);
    const float select_ms = median_ms(
        [&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr, kSparseCompress | kSparseScores | kSparseSelect)); }, 10);
    const float attend_ms = median_ms([&] { CK(sparse_attention_run(c.a, c.plan, c.ws, nullptr, kSparseAttend)); }, 10);
    PrefillAttentionArgs pa;
    pa.q = c.q;
    pa.out = c.out;
    pa.k_cache = L.k;
    pa.v_cache = L.v;
    pa.block_table = L.bt;
    pa.q_offsets = c.offs;
    pa.prefix_lens = c.pre;
    pa.batch = 1;
    pa.n_heads = kHeads;
    pa.n_kv_heads = kKv;
    pa.head_dim = kD;
    pa.page_size = kPage;
    pa.block_table_stride = L.pages_per_seq;
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
    std::printf("%-8s %5d %7d %6d %10.4f %10.4f %8.2f %7d %10.4f %10.4f\n", "prefill", 1, ctx, q_len, dense_ms,
                sparse_ms, dense_ms / sparse_ms, c.plan.splits, select_ms, attend_ms);
    std::printf("(dense prefill: the faster of prefill_attn_block 64 and 128; sparse workspace %.0f MiB)\n",
                c.plan.workspace_bytes / 1048576.0);
    c.free_all();
    free_layer(L);
  }
  return 0;
}
