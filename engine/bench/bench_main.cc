// soartune-bench: the CUDA engine on a synthetic model (default synthetic:llama3-8b, weights generated on
// the device), every number beside its roofline: bytes over the copy bandwidth and FLOPs over the bf16
// matmul rate, both measured in the same run.
//   decode ms/step at batch 1 and 8 for each weight format (and KV dtype), 4k-token prefill, decode at 32k
//   context with bf16 vs fp8 KV, each GEMV variant on the layer shapes, and (--only linear) the ways to
//   multiply m rows by a layer's weights side by side: the fused-dequantisation GEMV, the GEMM (cuBLAS, after
//   expanding quantised weights to bf16) and, for int8 / int4 at 16-256 rows, the quantised-weight GEMM.
//   --only sala: synthetic:minicpm-sala-9b (decode at batch 1, 8, 64 with bf16 and int4 g128 weights, prefill
//   of 4k and 60k tokens) beside synthetic:llama3-8b (the same decode, 4k prefill), against the H200's
//   datasheet rooflines (bench_sala below). --only sala_sparse: minicpm-sala-9b at 60k tokens, softmax layers
//   dense against InfLLM-v2 sparse (bench_sala_sparse below).
// Output: a table on stdout, and one JSON object per row to --json (for scripts/device-run.sh).
#include <CLI/CLI.hpp>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <iterator>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/kernel_variants.h"
#include "engine/bench/step_timing.h"
#include "engine/bench/synthetic_weights.h"
#include "engine/cuda/cuda_model.h"
#include "engine/model_loader.h"
#include "kernels/gemm.cuh"
#include "kernels/gemv.cuh"
#include "kernels/qgemm.cuh"
#include "kernels/synthetic.cuh"

namespace st = soartune;
namespace kn = soartune::kernels;
using soartune::Status;
namespace eb = soartune::engine::bench;

namespace {

#define BENCH_CK(stmt)                                                                           \
  do {                                                                                           \
    cudaError_t e_ = (stmt);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s\n", kn::cuda_error_message(e_, #stmt, __FILE__, __LINE__).c_str()); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

void check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message.c_str());
    std::exit(1);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of `reps` event-timed runs of f after `warm` warm-ups.
template <typename F>
double time_events(F&& f, int warm, int reps, cudaStream_t s) {
  cudaEvent_t a, b;
  BENCH_CK(cudaEventCreate(&a));
  BENCH_CK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) f();
  BENCH_CK(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    BENCH_CK(cudaEventRecord(a, s));
    f();
    BENCH_CK(cudaEventRecord(b, s));
    BENCH_CK(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

struct Ceilings {
  double copy_gbs = 0;     // GB/s, bytes read + written
  double bf16_tflops = 0;  // TFLOP/s, random inputs
};

Ceilings measure_ceilings() {
  Ceilings c;
  cudaStream_t s;
  BENCH_CK(cudaStreamCreate(&s));
  const size_t bytes = size_t(4) << 30;
  void *a, *b;
  BENCH_CK(cudaMalloc(&a, bytes));
  BENCH_CK(cudaMalloc(&b, bytes));
  BENCH_CK(kn::fill_uniform_bf16(a, int64_t(bytes / 2), 7, 1.f, s));
  const double ms = time_events([&] { BENCH_CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); }, 3, 10, s);
  c.copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  cudaFree(a);
  cudaFree(b);
  const int n = 8192;
  void *x, *y, *z;
  BENCH_CK(cudaMalloc(&x, size_t(n) * n * 2));
  BENCH_CK(cudaMalloc(&y, size_t(n) * n * 2));
  BENCH_CK(cudaMalloc(&z, size_t(n) * n * 2));
  BENCH_CK(kn::fill_uniform_bf16(x, int64_t(n) * n, 8, 1.f, s));
  BENCH_CK(kn::fill_uniform_bf16(y, int64_t(n) * n, 9, 1.f, s));
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, s);
  const float al = 1.f, be = 0.f;
  const double gms = time_events(
      [&] {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &al, x, CUDA_R_16BF, n, y, CUDA_R_16BF, n, &be, z,
                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      },
      3, 10, s);
  c.bf16_tflops = 2.0 * n * double(n) * n / (gms * 1e-3) / 1e12;
  cublasDestroy(h);
  cudaFree(x);
  cudaFree(y);
  cudaFree(z);
  cudaStreamDestroy(s);
  return c;
}

struct Row {
  std::string what, weights, kv;
  int batch = 0, context = 0;
  double ms = 0, roofline_ms = 0, bytes = 0, flops = 0;
  double graph_ms = 0;  // decode: device time of one graph replay, back to back (no host copies or sync)
  std::string bound;
  std::string detail;   // what the bytes or FLOPs are made of (bench_sala)
};

std::vector<Row> g_rows;
std::string g_json_path;

void emit(const Row& r) {
  g_rows.push_back(r);
  char graph[32] = "";
  if (r.graph_ms > 0) std::snprintf(graph, sizeof graph, "  graph %.3f", r.graph_ms);
  std::printf("%-10s %-8s %-9s %5d %6d %10.3f %10.3f %7.2fx %s%s%s%s\n", r.what.c_str(), r.weights.c_str(), r.kv.c_str(),
              r.batch, r.context, r.ms, r.roofline_ms, r.ms / r.roofline_ms, r.bound.c_str(), graph,
              r.detail.empty() ? "" : "  ", r.detail.c_str());
  std::fflush(stdout);
  if (!g_json_path.empty()) {
    std::ofstream f(g_json_path, std::ios::app);
    f << "{\"what\":\"" << r.what << "\",\"weights\":\"" << r.weights << "\",\"kv\":\"" << r.kv
      << "\",\"batch\":" << r.batch << ",\"context\":" << r.context << ",\"ms\":" << r.ms
      << ",\"roofline_ms\":" << r.roofline_ms << ",\"bytes\":" << r.bytes  << ",\"flops\":" << r.flops
      << ",\"graph_ms\":" << r.graph_ms << ",\"bound\":\"" << r.bound << "\",\"detail\":\"" << r.detail << "\"}\n";
  }
}

Row roofline(Row r, const Ceilings& c) {
  const double tb = r.bytes / (c.copy_gbs * 1e9) * 1e3, tf = r.flops / (c.bf16_tflops * 1e12) * 1e3;
  r.roofline_ms = std::max(tb, tf);
  r.bound = tb >= tf ? "memory" : "compute";
  return r;
}

struct Format {
  std::string name;
  kn::WeightFormat format;
  int group;
  kn::WeightFormat lm_head = kn::WeightFormat::kBf16;  // the lm_head_bits knob: bf16, int8 or int4 (same group)
};

// The paths for m rows through one layer's four linears (qkv, o, gate|up, down of cfg; 109 MB of int4 g128
// weights for llama3-8b, more than L2, so every repetition reads them from DRAM): the fused-dequantisation
// GEMV on the tensor cores ("gemv": ceil(m / 32) launches of up to 32 rows, each reading the weights once),
// the prefill GEMM ("gemm": quantised weights expanded to bf16, then cuBLAS) and, for int8 / int4 weights at
// 16-256 rows, the quantised-weight GEMM ("qgemm": dequantised tile by tile in shared memory, kernels/qgemm.cuh).
// The engine takes the GEMV up to 32 rows and the GEMM above (CudaModel::linear); this measures that choice for
// each format, and what the quantised-weight GEMM would change. Rows "lin_gemv" / "lin_gemm" / "lin_qgemm",
// batch = m.
void bench_linear_paths(const st::engine::ModelConfig& cfg, const Format& fm, int reps, const Ceilings& ceil) {
  cudaStream_t s;
  BENCH_CK(cudaStreamCreate(&s));
  const int64_t d = cfg.hidden, f = cfg.intermediate, qkv = cfg.q_dim() + 2 * cfg.kv_dim();
  const int64_t shapes[4][2] = {{qkv, d}, {d, cfg.q_dim()}, {2 * f, d}, {d, f}};  // {n, k}
  const int max_m = 4096;
  std::vector<kn::DeviceLinear> ws;
  std::vector<void*> bufs;
  size_t scratch = 0;
  double wbytes = 0, nk = 0, sum_n = 0, sum_k = 0;
  int64_t max_n = 0, max_k = 0;
  for (int i = 0; i < 4; ++i) {
    kn::DeviceLinear w;
    w.format = fm.format;
    w.n = int(shapes[i][0]);
    w.k = int(shapes[i][1]);
    w.group = kn::is_quantized(fm.format) ? (fm.group > 0 ? fm.group : w.k) : 0;
    void* p = nullptr;
    const size_t wb = kn::weight_bytes(w.format, w.n, w.k), sb = kn::scale_bytes(w.format, w.n, w.k, w.group);
    BENCH_CK(cudaMalloc(&p, wb));
    bufs.push_back(p);
    w.w = p;
    if (fm.format == kn::WeightFormat::kBf16) {
      BENCH_CK(kn::fill_uniform_bf16(p, int64_t(w.n) * w.k, 100 + i, 0.02f, s));
    } else {
      BENCH_CK(kn::fill_random_codes(p, int64_t(w.n) * w.k, 100 + i, fm.format == kn::WeightFormat::kInt4 ? 4 : 8, s));
      float* sc = nullptr;
      BENCH_CK(cudaMalloc(reinterpret_cast<void**>(&sc), sb));
      bufs.push_back(sc);
      BENCH_CK(kn::fill_uniform_f32(sc, int64_t(sb / 4), 200 + i, 0.001f, 0.01f, s));
      w.scales = sc;
    }
    ws.push_back(w);
    scratch = std::max(scratch, kn::gemm_scratch_bytes(w));
    wbytes += double(wb + sb);
    nk += double(w.n) * w.k;
    sum_n += w.n;
    sum_k += w.k;
    max_n = std::max<int64_t>(max_n, w.n);
    max_k = std::max<int64_t>(max_k, w.k);
  }
  void *x = nullptr, *y = nullptr;
  BENCH_CK(cudaMalloc(&x, size_t(max_m) * max_k * 2));
  BENCH_CK(cudaMalloc(&y, size_t(max_m) * max_n * 4));
  BENCH_CK(kn::fill_uniform_bf16(x, int64_t(max_m) * max_k, 300, 1.f, s));
  kn::GemmContext ctx;
  if (cublasCreate(&ctx.cublas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    std::exit(1);
  }
  cublasSetStream(ctx.cublas, s);
  if (scratch > 0) BENCH_CK(cudaMalloc(&ctx.scratch, scratch));
  ctx.scratch_bytes = scratch;
  auto gemv_path = [&](int m) {
    for (const kn::DeviceLinear& w : ws)
      for (int r0 = 0; r0 < m; r0 += kn::kGemvMaxBatch) {
        kn::GemvArgs a;
        a.w = w;
        a.x = static_cast<const uint16_t*>(x) + int64_t(r0) * w.k;
        a.y = static_cast<float*>(y) + int64_t(r0) * w.n;
        a.batch = std::min(kn::kGemvMaxBatch, m - r0);
        kn::GemvPlan plan;
        const std::string e = kn::gemv_plan(a, "auto", &plan);
        if (!e.empty()) {
          std::fprintf(stderr, "linear: gemv_plan: %s\n", e.c_str());
          std::exit(1);
        }
        BENCH_CK(kn::gemv_run(a, plan, s));
      }
  };
  auto gemm_path = [&](int m) {
    for (const kn::DeviceLinear& w : ws) {
      const std::string e = kn::gemm_run(ctx, w, x, w.k, y, w.n, m, s);
      if (!e.empty()) {
        std::fprintf(stderr, "linear: gemm_run: %s\n", e.c_str());
        std::exit(1);
      }
    }
  };
  // The quantised-weight GEMM (kernels/qgemm.cuh), automatic k slices, up to its kQgemmMaxRows rows.
  int sms = 0;
  BENCH_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::vector<int> rows = {1, 8, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256, 512, 4096};
  auto qgemm_rows = [&](int m) { return kn::is_quantized(fm.format) && m >= 16 && m <= kn::kQgemmMaxRows; };
  size_t qgemm_ws = 0;
  for (const kn::DeviceLinear& w : ws)
    for (int m : rows)
      if (qgemm_rows(m)) qgemm_ws = std::max(qgemm_ws, kn::qgemm_workspace_bytes(w, m, kn::qgemm_auto_splits(w, m, sms)));
  void* qws = nullptr;
  if (kn::is_quantized(fm.format) && qgemm_ws > 0) BENCH_CK(cudaMalloc(&qws, qgemm_ws));
  auto qgemm_path = [&](int m) {
    for (const kn::DeviceLinear& w : ws) {
      kn::QgemmArgs a;
      a.w = w;
      a.x = x;
      a.y = y;
      a.m = m;
      a.workspace = static_cast<float*>(qws);
      a.workspace_bytes = qgemm_ws;
      kn::QgemmPlan plan;
      const std::string e = kn::qgemm_plan(a, sms, &plan);
      if (!e.empty()) {
        std::fprintf(stderr, "linear: qgemm_plan: %s\n", e.c_str());
        std::exit(1);
      }
      BENCH_CK(kn::qgemm_run(a, plan, s));
    }
  };
  for (int m : rows) {
    Row g, c, q;
    g.what = "lin_gemv", c.what = "lin_gemm", q.what = "lin_qgemm";
    g.weights = c.weights = q.weights = fm.name;
    g.kv = c.kv = q.kv = "-";
    g.batch = c.batch = q.batch = m;
    g.bytes = c.bytes = q.bytes = wbytes + double(m) * (2 * sum_k + 4 * sum_n);  // weights (+ scales), x read, y written
    g.flops = c.flops = q.flops = 2.0 * m * nk;
    g.ms = time_events([&] { gemv_path(m); }, 2, reps, s);
    c.ms = time_events([&] { gemm_path(m); }, 2, reps, s);
    emit(roofline(g, ceil));
    emit(roofline(c, ceil));
    if (qgemm_rows(m)) {
      q.ms = time_events([&] { qgemm_path(m); }, 2, reps, s);
      emit(roofline(q, ceil));
    }
  }
  if (qws) cudaFree(qws);
  cublasDestroy(ctx.cublas);
  if (ctx.scratch) cudaFree(ctx.scratch);
  cudaFree(x);
  cudaFree(y);
  for (void* p : bufs) cudaFree(p);
  cudaStreamDestroy(s);
}

// Device time per stage of one eager (graph-free) run of `step`, beside the timed forward.
void print_profile(st::engine::cuda::CudaModel& m, const st::engine::Step& step, const std::string& label,
                   double forward_ms) {
  std::vector<std::pair<std::string, double>> stages;
  check(eb::profile_step(m, step, &stages), "profile");
  double total = 0;
  std::string line;
  for (const auto& [name, ms] : stages) {
    total += ms;
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s=%.3f", name.c_str(), ms);
    line += buf;
  }
  std::printf("profile %s: device %.3f ms (eager) vs forward %.3f ms (graph):%s\n", label.c_str(), total, forward_ms,
              line.c_str());
}

// Decode steps: `batch` sequences each at context `ctx` (KV prefilled with random values).
double time_decode(st::engine::cuda::CudaModel& m, int batch, int ctx, int reps, const std::string& profile_label = "",
                   double* graph_ms = nullptr) {
  const int page = 16, stride = (ctx + page - 1) / page;
  std::vector<int32_t> tokens(batch), positions(batch), rows(batch), argmax(batch), tables(size_t(batch) * stride);
  std::vector<st::engine::StepSequence> seqs(batch);
  for (int b = 0; b < batch; ++b) {
    tokens[b] = (1000 + 17 * b) % m.config().vocab;
    positions[b] = ctx - 1;
    rows[b] = b;
    for (int p = 0; p < stride; ++p) tables[size_t(b) * stride + p] = b * stride + p;
    seqs[b].slot = b;
    seqs[b].first_token = b;
    seqs[b].num_tokens = 1;
    seqs[b].start_pos = ctx - 1;
    seqs[b].block_table = std::span<const int32_t>(tables.data() + size_t(b) * stride, stride);
  }
  st::engine::Step step;
  step.tokens = tokens;
  step.positions = positions;
  step.seqs = seqs;
  step.output_rows = rows;
  step.decode_tokens = batch;
  st::engine::StepOutput out;
  out.argmax = argmax;
  std::vector<double> t;
  for (int i = 0; i < reps + 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    check(m.forward(step, out), "decode forward");
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= 3) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  if (graph_ms) check(eb::replay_graph(m, batch, reps, graph_ms), "graph replay");
  if (!profile_label.empty()) print_profile(m, step, profile_label, median(t));
  return median(t);
}

double time_prefill(st::engine::cuda::CudaModel& m, int len, int reps, const std::string& profile_label) {
  const int page = 16, stride = (len + page - 1) / page;
  std::vector<int32_t> tokens(len), positions(len), rows{len - 1}, argmax(1), table(stride);
  for (int i = 0; i < len; ++i) tokens[i] = (i * 7919) % m.config().vocab, positions[i] = i;
  for (int p = 0; p < stride; ++p) table[p] = p;
  std::vector<st::engine::StepSequence> seqs(1);
  seqs[0].num_tokens = len;
  seqs[0].block_table = table;
  st::engine::Step step;
  step.tokens = tokens;
  step.positions = positions;
  step.seqs = seqs;
  step.output_rows = rows;
  st::engine::StepOutput out;
  out.argmax = argmax;
  std::vector<double> t;
  for (int i = 0; i < reps + 1; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    check(m.forward(step, out), "prefill forward");
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= 1) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  print_profile(m, step, profile_label, median(t));
  return median(t);
}


// The H200's datasheet rates (SXM, 141 GB HBM3e: 4.8 TB/s; the 4.29e12 B/s a stream copy reaches, and the
// 790 TFLOP/s dense bf16 that cuBLAS sustains on large GEMMs), fixed so that rows of different calls compare.
constexpr double kH200Bandwidth = 4.29e12;  // B/s
constexpr double kH200Bf16Flops = 790e12;   // FLOP/s

Row roofline_h200(Row r) {
  const double tb = r.bytes / kH200Bandwidth * 1e3, tf = r.flops / kH200Bf16Flops * 1e3;
  r.roofline_ms = std::max(tb, tf);
  r.bound = tb >= tf ? "memory" : "compute";
  return r;
}

// Multiply-adds of one token through every linear layer (lm_head apart), whatever the layer mix: the fused
// projection (q | k | v | output gate), o, gate|up and down.
double linear_macs_per_token(const st::engine::ModelConfig& c) {
  double macs = 0;
  for (int l = 0; l < c.layers; ++l) {
    const bool lightning = c.mixer(l) == st::engine::MixerKind::kLightning;
    const double qd = c.layer_q_dim(l), kvd = c.layer_kv_dim(l);
    const bool gate = lightning ? c.lightning_output_gate : c.attn_output_gate;
    macs += double(c.hidden) * (qd + 2 * kvd + (gate ? qd : 0)) + qd * c.hidden + 3.0 * c.hidden * c.intermediate;
  }
  return macs;
}

// A row against the H200's fixed rates (roofline_h200: comparable between calls), with the same bound on this
// card's measured ceilings appended to its detail: on another card (an H100) the fixed rates overstate the gap.
void emit_sala(Row r, const Ceilings& ceil) {
  const Row here = roofline(r, ceil);
  char d[96];
  std::snprintf(d, sizeof d, "; on this card's measured ceilings: bound %.3f ms, gap %.2fx", here.roofline_ms,
                r.ms / here.roofline_ms);
  r.detail += d;
  emit(roofline_h200(r));
}

// --only sala: MiniCPM-SALA at its release shapes beside Llama-3-8B, one call, the same engine.
//   decode (ctx 512, bf16 KV, CUDA graphs) at batch 1, 8, 64, bf16 and int4 g128 weights (SALA also bf16
//   weights with the lightning state in bf16, the `lightning_state_dtype` knob, kv column "bf16/st16"):
//     bound = (weight bytes + lightning state bytes read and written + KV bytes read) / 4.29e12 B/s
//   prefill of one 4k-token prompt (and 60k for SALA; softmax layers dense, as the CUDA backend runs them):
//     bound = GEMM FLOPs (2 * tokens * linear MACs + lm_head's row) / 790e12 FLOP/s
// only_weights (--weights) keeps the formats named (bf16 covers both state dtypes); no_prefill (--no-prefill)
// leaves the prefill rows out.
void bench_sala(int reps, bool no_profile, const std::string& gemv_variant, const Ceilings& ceil,
                const std::vector<std::string>& only_weights, bool no_prefill, const std::vector<int>& batches) {
  struct SalaFormat {
    Format f;
    kn::LightningStateDtype state = kn::LightningStateDtype::kFp32;
  };
  const std::vector<SalaFormat> fmts = {{{"bf16", kn::WeightFormat::kBf16, 0}},
                                        {{"int4g128", kn::WeightFormat::kInt4, 128}},
                                        {{"bf16", kn::WeightFormat::kBf16, 0}, kn::LightningStateDtype::kBf16}};
  for (const std::string preset : {"minicpm-sala-9b", "llama3-8b"}) {
    auto cr = st::engine::synthetic_config(preset);
    check(cr.status(), "synthetic_config");
    const st::engine::ModelConfig cfg = cr.value();
    const bool sala = cfg.has_lightning();
    const std::string tag = sala ? "sala" : "llama";
    // KV bytes a decode token reads per context position: softmax layers only.
    const double kv_per_pos = double(cfg.softmax_layers()) * 2 * cfg.kv_dim() * 2;
    for (const SalaFormat& sf : fmts) {
      const Format& fm = sf.f;
      if (!only_weights.empty() && std::find(only_weights.begin(), only_weights.end(), fm.name) == only_weights.end())
        continue;
      const bool bf16_state = sf.state == kn::LightningStateDtype::kBf16;
      if (bf16_state && !sala) continue;   // no lightning state to store in bf16
      {
        const int ctx = 512, max_b = 64;
        auto m = std::make_unique<st::engine::cuda::CudaModel>();
        check(m->init(0), "init");
        check(eb::generate_weights(*m, cfg, {fm.format, fm.group, 1, fm.lm_head}), "generate");
        st::engine::cuda::CudaOptions o;
        o.max_sequences = max_b;
        o.max_output_rows = max_b;
        o.max_step_tokens = max_b;
        o.max_context = ctx;
        o.cuda_graph_max_bs = max_b;
        o.gemv_variant = gemv_variant;
        o.lightning_state_dtype = sf.state;
        check(m->prepare(o), "prepare decode");
        check(eb::fill_kv_random(*m, 11), "fill kv");
        const double wbytes = double(m->weight_bytes());
        const double state_slot = double(m->lightning_state_bytes_per_slot());
        for (int b : batches) {
          Row r;
          r.what = tag + "_dec";
          r.weights = fm.name;
          r.kv = bf16_state ? "bf16/st16" : "bf16";
          r.batch = b;
          r.context = ctx;
          r.ms = time_decode(*m, b, ctx, reps,
                             no_profile ? std::string() : tag + " decode " + fm.name + " " + r.kv + " b" + std::to_string(b),
                             &r.graph_ms);
          const double state_rw = 2.0 * b * state_slot, kv = double(b) * ctx * kv_per_pos;
          r.bytes = wbytes + state_rw + kv;
          r.flops = 2.0 * b * (linear_macs_per_token(cfg) + double(cfg.vocab) * cfg.hidden);
          char d[160];
          std::snprintf(d, sizeof d, "weights %.2f GB + state r+w %.3f GB + kv %.3f GB", wbytes / 1e9, state_rw / 1e9,
                        kv / 1e9);
          r.detail = d;
          emit_sala(r, ceil);
        }
      }
      if (bf16_state || no_prefill) continue;   // prefill rows: once, with the fp32 state
      for (int len : sala ? std::vector<int>{4096, 60000} : std::vector<int>{4096}) {
        auto m = std::make_unique<st::engine::cuda::CudaModel>();
        check(m->init(0), "init");
        check(eb::generate_weights(*m, cfg, {fm.format, fm.group, 1, fm.lm_head}), "generate");
        st::engine::cuda::CudaOptions o;
        o.max_sequences = 1;
        o.max_output_rows = 1;
        o.max_step_tokens = len;
        o.max_context = len;
        o.cuda_graphs = false;
        o.gemv_variant = gemv_variant;
        check(m->prepare(o), "prepare prefill");
        Row r;
        r.what = tag + "_pre";
        r.weights = fm.name;
        r.kv = "bf16";
        r.batch = 1;
        r.context = len;
        r.ms = time_prefill(*m, len, len > 8192 ? 2 : std::max(3, reps / 4), tag + " prefill " + fm.name + " " + std::to_string(len));
        r.bytes = double(m->weight_bytes()) + double(len) * kv_per_pos;
        r.flops = 2.0 * len * linear_macs_per_token(cfg) + 2.0 * double(cfg.vocab) * cfg.hidden;
        const double attn = 4.0 * cfg.softmax_layers() * cfg.q_dim() * (double(len) * (len + 1) / 2);
        char d[160];
        std::snprintf(d, sizeof d, "GEMM %.1f TFLOP; dense softmax attention %.1f TFLOP more (not in the bound)",
                      r.flops / 1e12, attn / 1e12);
        r.detail = d;
        emit_sala(r, ceil);
      }
    }
  }
}

// --only sala_sparse: synthetic:minicpm-sala-9b (bf16 weights) at a 60000-token context with its softmax layers
// dense, then InfLLM-v2 sparse (its sparse_config: dense_len 8192, topk 64, 2048-token window;
// engine/cuda/sparse_layer.h): one 60000-token prefill step in slot 0, then decode steps at that context at
// batch 1 and 8 (slot 0 holds the prefill's KV and compressed keys; slots 1..7 fill_kv_random's KV and zero
// compressed keys, which attend as many blocks). Medians of forward() and of graph replays.
void bench_sala_sparse(int reps) {
  auto cr = st::engine::synthetic_config("minicpm-sala-9b");
  check(cr.status(), "synthetic_config");
  const st::engine::ModelConfig cfg = cr.value();
  const int len = 60000;
  const Format fm{"bf16", kn::WeightFormat::kBf16, 0};
  double prefill_ms[2] = {}, decode_ms[2][2] = {}, graph_ms[2][2] = {};
  for (int sparse = 0; sparse < 2; ++sparse) {
    auto m = std::make_unique<st::engine::cuda::CudaModel>();
    check(m->init(0), "init");
    check(eb::generate_weights(*m, cfg, {fm.format, fm.group, 1, fm.lm_head}), "generate");
    st::engine::cuda::CudaOptions o;
    o.max_sequences = 8;
    o.max_output_rows = 8;
    o.max_step_tokens = len;
    o.max_context = len;
    o.cuda_graph_max_bs = 8;
    o.sparse_attention = sparse == 1;
    check(m->prepare(o), "prepare");
    if (sparse) std::printf("sparse attention buffers: %.1f MB\n", double(m->sparse_attention_bytes()) / 1e6);
    check(eb::fill_kv_random(*m, 13), "fill kv");
    const std::string tag = sparse ? "sala sparse" : "sala dense";
    prefill_ms[sparse] = time_prefill(*m, len, 2, tag + " prefill " + std::to_string(len));
    for (int i = 0; i < 2; ++i)
      decode_ms[sparse][i] = time_decode(*m, i ? 8 : 1, len, reps, tag + " decode b" + std::to_string(i ? 8 : 1),
                                         &graph_ms[sparse][i]);
  }
  std::printf("minicpm-sala-9b bf16, context %d: softmax layers dense vs sparse (ms, median)\n", len);
  std::printf("%-26s %10s %10s %8s\n", "step", "dense", "sparse", "ratio");
  std::printf("%-26s %10.2f %10.2f %8.2f\n", "prefill 60000 tokens", prefill_ms[0], prefill_ms[1],
              prefill_ms[1] / prefill_ms[0]);
  for (int i = 0; i < 2; ++i) {
    const std::string b = i ? "8" : "1";
    std::printf("%-26s %10.3f %10.3f %8.2f\n", ("decode b" + b + " forward").c_str(), decode_ms[0][i], decode_ms[1][i],
                decode_ms[1][i] / decode_ms[0][i]);
    std::printf("%-26s %10.3f %10.3f %8.2f\n", ("decode b" + b + " graph replay").c_str(), graph_ms[0][i],
                graph_ms[1][i], graph_ms[1][i] / graph_ms[0][i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"soartune-bench: CUDA engine timings beside their rooflines"};
  std::string model = "synthetic:llama3-8b";
  std::string only = "all";
  int reps = 20;
  app.add_option("--model", model, "synthetic:<preset>");
  app.add_option("--only", only, "all | decode | prefill | long | variants | linear | sala | sala_sparse");
  app.add_option("--reps", reps, "timed repetitions (median reported)");
  app.add_option("--json", g_json_path, "append one JSON object per result to this file");
  std::vector<std::string> only_weights;
  std::vector<int> only_batches;
  std::vector<std::string> only_kv;
  bool no_profile = false;
  app.add_option("--kv", only_kv, "KV dtypes of the short-context decode with bf16 weights (default all)");
  app.add_option("--weights", only_weights, "weight formats to run (default all: bf16 int8 int4g128 int4g64 int4g32 int4g128-lm8 int4g128-lm4)");
  app.add_option("--batches", only_batches, "decode batches to run, 1..32 (default 1 8; --only sala: 1..64, default 1 8 64)");
  app.add_flag("--no-profile", no_profile, "skip the eager per-stage profiles");
  bool no_prefill = false;
  app.add_flag("--no-prefill", no_prefill, "--only sala: decode rows only");
  std::string gemv_variant = "auto";
  app.add_option("--gemv-variant", gemv_variant, "gemv_variant of the decode and 32k runs (default auto)");
  int kv_splits = 0;
  app.add_option("--kv-splits", kv_splits, "decode_kv_splits of the short-context decode runs (default 0: auto)")
      ->check(CLI::IsMember(std::vector<int>(std::begin(soartune::core::kDecodeKvSplits), std::end(soartune::core::kDecodeKvSplits))));
  CLI11_PARSE(app, argc, argv);
  if (only == "sala") {  // checked before the device is touched
    for (const std::string& w : only_weights)
      if (w != "bf16" && w != "int4g128") {
        std::fprintf(stderr, "--weights: %s is not one of bf16, int4g128 (--only sala)\n", w.c_str());
        return 2;
      }
    for (int b : only_batches)
      if (b < 1 || b > 64) {
        std::fprintf(stderr, "--batches: %d is not in 1..64 (--only sala)\n", b);
        return 2;
      }
  }
  if (model.rfind("synthetic:", 0) != 0) {
    std::fprintf(stderr, "--model: %s is not a synthetic:<preset>\n", model.c_str());
    return 2;
  }
  auto cfg_r = st::engine::synthetic_config(model.substr(10));
  if (!cfg_r.ok()) {
    std::fprintf(stderr, "--model: %s\n", cfg_r.status().message.c_str());
    return 2;
  }
  const st::engine::ModelConfig cfg = cfg_r.value();
  cudaDeviceProp prop{};
  BENCH_CK(cudaGetDeviceProperties(&prop, 0));
  const Ceilings ceil = measure_ceilings();
  std::printf("device %s, %d SMs; measured copy %.0f GB/s (read+write), bf16 GEMM %.0f TFLOP/s\n", prop.name,
              prop.multiProcessorCount, ceil.copy_gbs, ceil.bf16_tflops);
  if (only != "sala" && only != "sala_sparse") std::printf("model %s: %lld parameters\n", model.c_str(), (long long)cfg.parameter_count());
  std::printf("%-10s %-8s %-9s %5s %6s %10s %10s %8s %s\n", "what", "weights", "kv", "batch", "ctx", "ms", "roofline",
              "gap", "bound");
  {
    if (!g_json_path.empty()) {
      std::ofstream f(g_json_path, std::ios::app);
      f << "{\"what\":\"ceiling\",\"copy_gbps\":" << ceil.copy_gbs << ",\"bf16_tflops\":" << ceil.bf16_tflops
        << ",\"device\":\"" << prop.name << "\"}\n";
    }
  }

  if (only == "sala_sparse") {  // minicpm-sala-9b, whatever --model says
    bench_sala_sparse(reps);
    return 0;
  }
  if (only == "sala") {  // both models, whatever --model says (bench_sala; its arguments checked above)
    bench_sala(reps, no_profile, gemv_variant, ceil, only_weights, no_prefill,
               only_batches.empty() ? std::vector<int>{1, 8, 64} : only_batches);
    return 0;
  }

  const std::vector<Format> formats = {{"bf16", kn::WeightFormat::kBf16, 0},
                                       {"int8", kn::WeightFormat::kInt8, 0},
                                       {"int4g128", kn::WeightFormat::kInt4, 128},
                                       {"int4g64", kn::WeightFormat::kInt4, 64},
                                       {"int4g32", kn::WeightFormat::kInt4, 32},
                                       {"int4g128-lm8", kn::WeightFormat::kInt4, 128, kn::WeightFormat::kInt8},
                                       {"int4g128-lm4", kn::WeightFormat::kInt4, 128, kn::WeightFormat::kInt4}};
  const int64_t d = cfg.hidden, f = cfg.intermediate, qkv = cfg.q_dim() + 2 * cfg.kv_dim();
  const int64_t linear_params = cfg.layers * (d * qkv + cfg.q_dim() * d + 2 * d * f + f * d);
  auto kv_bytes_per_token = [&](kn::KvCacheDtype t) {
    return double(cfg.layers) * 2 * cfg.kv_dim() * kn::kv_dtype_bytes(t);
  };

  for (const std::string& w : only_weights) {
    if (std::none_of(formats.begin(), formats.end(), [&](const Format& f) { return f.name == w; })) {
      std::fprintf(stderr, "--weights: %s is not one of bf16, int8, int4g128, int4g64, int4g32, int4g128-lm8, int4g128-lm4\n", w.c_str());
      return 2;
    }
  }
  for (int b : only_batches) {
    if (b < 1 || b > 32) {
      std::fprintf(stderr, "--batches: %d is not in 1..32\n", b);
      return 2;
    }
  }
  const std::vector<int> batches = only_batches.empty() ? std::vector<int>{1, 8} : only_batches;
  const int max_batch = std::max(8, *std::max_element(batches.begin(), batches.end()));
  if (only == "linear") {  // one layer's linears through the GEMV and the GEMM paths (bench_linear_paths)
    for (const Format& fm : formats) {
      const bool listed = only_weights.empty() ? fm.name == "bf16" || fm.name == "int8" || fm.name == "int4g128"
                                               : std::find(only_weights.begin(), only_weights.end(), fm.name) != only_weights.end();
      if (listed) bench_linear_paths(cfg, fm, std::max(5, reps / 2), ceil);
    }
  }
  for (const Format& fm : formats) {
    if (!only_weights.empty() && std::find(only_weights.begin(), only_weights.end(), fm.name) == only_weights.end())
      continue;
    const bool do_decode = only == "all" || only == "decode";
    // Prefill: bf16 (the target) and int8 / int4 g128, whose layers are expanded to bf16 for cuBLAS.
    const bool do_prefill = (only == "all" || only == "prefill") && (fm.name == "bf16" || fm.name == "int8" || fm.name == "int4g128");
    const bool do_long = (only == "all" || only == "long") && (fm.name == "bf16" || fm.name == "int4g128");
    const bool do_var = (only == "all" || only == "variants");
    if (!do_decode && !do_prefill && !do_long && !do_var) continue;
    // Short-context decode (every KV dtype for bf16 weights, bf16 KV otherwise) and prefill.
    std::vector<kn::KvCacheDtype> kvs = {kn::KvCacheDtype::kBf16};
    if (fm.name == "bf16")
      kvs = {kn::KvCacheDtype::kBf16, kn::KvCacheDtype::kFp16, kn::KvCacheDtype::kFp8E4M3, kn::KvCacheDtype::kFp8E5M2};
    if (!only_kv.empty())
      kvs.erase(std::remove_if(kvs.begin(), kvs.end(),
                               [&](kn::KvCacheDtype k) {
                                 return std::find(only_kv.begin(), only_kv.end(), kn::kv_dtype_name(k)) == only_kv.end();
                               }),
                kvs.end());
    for (kn::KvCacheDtype kv : kvs) {
      if (!do_decode && !(do_prefill && kv == kn::KvCacheDtype::kBf16) && !(do_var && kv == kn::KvCacheDtype::kBf16))
        continue;
      auto m = std::make_unique<st::engine::cuda::CudaModel>();
      check(m->init(0), "init");
      check(eb::generate_weights(*m, cfg, {fm.format, fm.group, 1, fm.lm_head}), "generate");
      st::engine::cuda::CudaOptions o;
      o.kv_dtype = kv;
      o.max_sequences = max_batch;
      o.max_output_rows = max_batch;
      o.max_context = 4096;
      o.max_step_tokens = do_prefill && kv == kn::KvCacheDtype::kBf16 ? 4096 : max_batch;
      o.cuda_graph_max_bs = max_batch;
      o.gemv_variant = gemv_variant;
      o.decode_kv_splits = kv_splits;
      check(m->prepare(o), "prepare");
      check(eb::fill_kv_random(*m, 11), "fill kv");
      const double wbytes = double(m->weight_bytes());
      if (do_decode) {
        for (int b : batches) {
          const int ctx = 512;
          Row r;
          r.what = "decode";
          r.weights = fm.name;
          r.kv = kn::kv_dtype_name(kv);
          r.batch = b;
          r.context = ctx;
          const bool prof = !no_profile && (kv == kn::KvCacheDtype::kBf16 || fm.name == "bf16");
          r.ms = time_decode(*m, b, ctx, reps,
                             prof ? "decode " + fm.name + " " + r.kv + " b" + std::to_string(b) : std::string(),
                             &r.graph_ms);
          r.bytes = wbytes + b * ctx * kv_bytes_per_token(kv);
          r.flops = 2.0 * b * (linear_params + double(cfg.vocab) * d) + 4.0 * b * ctx * cfg.layers * cfg.q_dim();
          emit(roofline(r, ceil));
        }
      }
      if (do_prefill && kv == kn::KvCacheDtype::kBf16) {
        const int len = 4096;
        Row r;
        r.what = "prefill";
        r.weights = fm.name;
        r.kv = "bf16";
        r.batch = 1;
        r.context = len;
        r.ms = time_prefill(*m, len, std::max(3, reps / 4), "prefill " + fm.name + " 4096");
        r.bytes = wbytes + double(len) * kv_bytes_per_token(kv);
        r.flops = 2.0 * len * linear_params + 2.0 * double(cfg.vocab) * d +
                  4.0 * cfg.layers * cfg.q_dim() * (double(len) * (len + 1) / 2);
        emit(roofline(r, ceil));
      }
      if (do_var && kv == kn::KvCacheDtype::kBf16 && (fm.name == "bf16" || fm.name == "int8" || fm.name == "int4g128")) {
        // Whole-model decode with each GEMV variant forced: the gemv_variant knob as the tuner sees it.
        for (const std::string& v : kn::gemv_variant_names()) {
          st::engine::cuda::CudaOptions ov = o;
          ov.gemv_variant = v;
          ov.max_step_tokens = 8;
          m.reset();
          m = std::make_unique<st::engine::cuda::CudaModel>();
          check(m->init(0), "init");
          check(eb::generate_weights(*m, cfg, {fm.format, fm.group, 1, fm.lm_head}), "generate");
          check(m->prepare(ov), "prepare variant");
          check(eb::fill_kv_random(*m, 11), "fill kv");
          for (int b : batches) {
            Row r;
            r.what = "variant";
            r.weights = fm.name;
            r.kv = v;
            r.batch = b;
            r.context = 512;
            r.ms = time_decode(*m, b, 512, reps, "variant " + fm.name + " " + v + " b" + std::to_string(b));
            r.bytes = double(m->weight_bytes()) + b * 512 * kv_bytes_per_token(kn::KvCacheDtype::kBf16);
            r.flops = 2.0 * b * (linear_params + double(cfg.vocab) * d);
            emit(roofline(r, ceil));
          }
        }
      }
    }
    if (do_long) {
      for (const auto& [kv, splits] : std::vector<std::pair<kn::KvCacheDtype, int>>{
               {kn::KvCacheDtype::kBf16, 0}, {kn::KvCacheDtype::kFp8E4M3, 0}, {kn::KvCacheDtype::kBf16, 8},
               {kn::KvCacheDtype::kFp8E4M3, 8}, {kn::KvCacheDtype::kBf16, 64}, {kn::KvCacheDtype::kFp8E4M3, 64}}) {
        if (splits != 0 && fm.name != "int4g128") continue;
        auto m = std::make_unique<st::engine::cuda::CudaModel>();
        check(m->init(0), "init");
        check(eb::generate_weights(*m, cfg, {fm.format, fm.group, 1, fm.lm_head}), "generate");
        st::engine::cuda::CudaOptions o;
        o.kv_dtype = kv;
        o.max_sequences = 8;
        o.max_output_rows = 8;
        o.max_context = 32768;
        o.max_step_tokens = 8;
        o.decode_kv_splits = splits;
        o.cuda_graph_max_bs = 8;
        o.gemv_variant = gemv_variant;
        check(m->prepare(o), "prepare long");
        check(eb::fill_kv_random(*m, 13), "fill kv");
        for (int b : batches) {
          const int ctx = 32768;
          Row r;
          r.what = "decode32k";
          r.weights = fm.name;
          r.kv = std::string(kn::kv_dtype_name(kv)) + (splits ? "/s" + std::to_string(splits) : "");
          r.batch = b;
          r.context = ctx;
          r.ms = time_decode(*m, b, ctx, reps,
                             no_profile ? std::string() : "decode32k " + fm.name + " " + r.kv + " b" + std::to_string(b),
                             &r.graph_ms);
          r.bytes = double(m->weight_bytes()) + double(b) * ctx * kv_bytes_per_token(kv);
          r.flops = 2.0 * b * (linear_params + double(cfg.vocab) * d) + 4.0 * b * double(ctx) * cfg.layers * cfg.q_dim();
          emit(roofline(r, ceil));
        }
      }
    }
  }
  return 0;
}
