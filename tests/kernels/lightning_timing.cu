// Timing of the lightning-attention kernels on MiniCPM-SALA's release shape (32 heads of 128, as many kv
// heads; one lightning layer per launch), beside the measured copy bandwidth. Not a test: prints a table.
//   decode step, batch 1 / 8 / 64, fp32 and bf16 state: bytes = the states read + written (q/k/v and the
//     output are 1% of it at d 128); GB/s against the copy measured here and the H200's 4.29 TB/s copy figure
//   prefill of one 4k and one 60k prompt, chunk 64 / 128 / 256, the tensor-core and the CUDA-core form side by
//     side on the same inputs: FLOPs of the chunked form (causal Q K^T and A V: 2 C^2 d a chunk; Q S and the
//     state update: 4 C d^2), TFLOP/s, and the two forms' outputs' difference ||tc - cuda|| / ||cuda||
//   q/k norm + RoPE and output norm + gate over a 4k prompt: bytes read + written, GB/s; the same at decode
//     sizes (1, 8, 64 tokens), and the softmax layers' output gate (bf16 input, no norm)
// CUDA-event timed, median of N launches after 3 warm-up ones.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/lightning.cuh"
#include "tests/kernels/timing_support.cuh"

using namespace soartune::kernels;
using namespace soartune::kernels::timing;

constexpr double kH200CopyGBs = 4290;

int main() {
  print_device();
  const double copy_gbs = measure_copy_gbs();

  const int heads = 32, kv_heads = 32, d = 128, width = (heads + 2 * kv_heads) * d;
  std::vector<float> g(heads);
  for (int i = 0; i < heads; ++i) g[i] = -std::pow(2.f, -8.f * float(i + 1) / float(heads));
  float* dg = dev_copy(g);

  // ---- decode ----
  std::printf("\ndecode step (one lightning layer, %d heads x %d, state updated in place)\n", heads, d);
  std::printf("%-6s %5s %10s %11s %9s %9s %9s\n", "state", "batch", "us", "state MB", "GB/s", "of copy", "of 4.29T");
  const int max_batch = 64;
  const size_t max_state = size_t(max_batch) * heads * d * d * 4;
  void *state, *qkv, *out;
  CK(cudaMalloc(&state, max_state));
  CK(cudaMemset(state, 0, max_state));
  CK(cudaMalloc(&qkv, size_t(max_batch) * width * 2));
  fill_bf16(qkv, size_t(max_batch) * width, std::uniform_real_distribution<float>(-1.f, 1.f), 1);
  CK(cudaMalloc(&out, size_t(max_batch) * heads * d * 4));
  for (LightningStateDtype dt : {LightningStateDtype::kFp32, LightningStateDtype::kBf16})
    for (int batch : {1, 8, 64}) {
      std::vector<int32_t> offs(batch + 1), starts(batch, 100), slots(batch);
      for (int i = 0; i <= batch; ++i) offs[i] = i;
      for (int i = 0; i < batch; ++i) slots[i] = i;
      int32_t *doffs = dev_copy(offs), *dstarts = dev_copy(starts), *dslots = dev_copy(slots);
      LightningArgs a;
      a.qkv = qkv, a.row_stride = width, a.out = static_cast<float*>(out), a.state = state, a.state_dtype = dt;
      a.slots = max_batch, a.q_offsets = doffs, a.start_pos = dstarts, a.seq_slots = dslots, a.log_decay = dg;
      a.scale = 1.f / std::sqrt(float(d)), a.batch = batch, a.max_tokens = 1, a.chunk = 64;
      a.heads = heads, a.kv_heads = kv_heads, a.head_dim = d;
      if (!lightning_can_implement(a).empty()) {
        std::printf("cannot run: %s\n", lightning_can_implement(a).c_str());
        return 1;
      }
      const float ms = median_ms([&] { CK(lightning_run(a, nullptr)); }, 50);
      const double bytes = 2.0 * batch * heads * d * d * lightning_state_bytes(dt);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("%-6s %5d %10.2f %11.2f %9.0f %8.0f%% %8.0f%%\n", dt == LightningStateDtype::kFp32 ? "fp32" : "bf16",
                  batch, ms * 1e3, bytes / 2 / 1e6, gbs, 100 * gbs / copy_gbs, 100 * gbs / kH200CopyGBs);
      dev_free(doffs, dstarts, dslots);
    }
  dev_free(state, qkv, out);

  // ---- prefill ----
  std::printf("\nprefill of one prompt (one lightning layer, fp32 state, from position 0)\n");
  std::printf("%7s %6s %9s %10s %8s %10s %8s %8s %10s\n", "tokens", "chunk", "GFLOP", "tc ms", "TFLOP/s", "cuda ms",
              "TFLOP/s", "speedup", "rel diff");
  const int max_t = 60000;
  CK(cudaMalloc(&qkv, size_t(max_t) * width * 2));
  fill_bf16(qkv, size_t(max_t) * width, std::uniform_real_distribution<float>(-1.f, 1.f), 2);
  CK(cudaMalloc(&out, size_t(max_t) * heads * d * 4));
  CK(cudaMalloc(&state, size_t(heads) * d * d * 4));
  float* out2;
  CK(cudaMalloc(&out2, size_t(max_t) * heads * d * 4));
  std::vector<float> h1, h2;
  for (int T : {4096, max_t})
    for (int chunk : {64, 128, 256}) {
      std::vector<int32_t> offs = {0, T}, starts = {0}, slots = {0};
      int32_t *doffs = dev_copy(offs), *dstarts = dev_copy(starts), *dslots = dev_copy(slots);
      LightningArgs a;
      a.qkv = qkv, a.row_stride = width, a.out = static_cast<float*>(out), a.state = state;
      a.state_dtype = LightningStateDtype::kFp32, a.slots = 1, a.q_offsets = doffs, a.start_pos = dstarts;
      a.seq_slots = dslots, a.log_decay = dg, a.scale = 1.f / std::sqrt(float(d)), a.batch = 1, a.max_tokens = T;
      a.chunk = chunk, a.heads = heads, a.kv_heads = kv_heads, a.head_dim = d;
      a.prefill_form = LightningPrefillForm::kTensorCores;
      if (!lightning_can_implement(a).empty()) {
        std::printf("cannot run: %s\n", lightning_can_implement(a).c_str());
        return 1;
      }
      const float ms = median_ms([&] { CK(lightning_run(a, nullptr)); }, T > 10000 ? 5 : 20);
      LightningArgs b = a;
      b.prefill_form = LightningPrefillForm::kCudaCores, b.out = out2;
      const float ms_cuda = median_ms([&] { CK(lightning_run(b, nullptr)); }, T > 10000 ? 3 : 20);
      // Both forms from position 0 (the state is reset): the outputs of the last runs, compared.
      const size_t n_out = size_t(T) * heads * d;
      h1.resize(n_out), h2.resize(n_out);
      CK(cudaMemcpy(h1.data(), out, n_out * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(h2.data(), out2, n_out * 4, cudaMemcpyDeviceToHost));
      double num = 0, den = 0, worst = 0;
      for (size_t i = 0; i < n_out; ++i) {
        const double e = double(h1[i]) - h2[i];
        num += e * e, den += double(h2[i]) * h2[i];
        worst = std::max(worst, std::fabs(e));
      }
      double flops = 0;
      for (int c0 = 0; c0 < T; c0 += chunk) {
        const double C = std::min(chunk, T - c0);
        flops += 2.0 * C * C * d + 4.0 * C * d * d;
      }
      flops *= heads;
      std::printf("%7d %6d %9.1f %10.3f %8.2f %10.3f %8.2f %7.2fx %10.2e\n", T, chunk, flops / 1e9, ms,
                  flops / (ms * 1e-3) / 1e12, ms_cuda, flops / (ms_cuda * 1e-3) / 1e12, ms_cuda / ms,
                  den > 0 ? std::sqrt(num / den) : worst);
      dev_free(doffs, dstarts, dslots);
    }

  // ---- the fused small ops over a 4k prompt ----
  std::printf("\nfused ops over 4096 tokens\n");
  std::printf("%-22s %10s %9s\n", "op", "us", "GB/s");
  {
    const int T = 4096;
    std::vector<int32_t> pos(T);
    for (int i = 0; i < T; ++i) pos[i] = i;
    std::vector<float> gamma(std::max(d, heads * d), 1.f);
    int32_t* dpos = dev_copy(pos);
    float* dgamma = dev_copy(gamma);
    LightningQkArgs q;
    q.qkv = qkv, q.row_stride = width, q.q_norm = dgamma, q.k_norm = dgamma, q.positions = dpos, q.rope = true;
    q.tokens = T, q.heads = heads, q.kv_heads = kv_heads, q.head_dim = d;
    const float qk_ms = median_ms([&] { CK(lightning_qk_run(q, nullptr)); }, 20);
    std::printf("%-22s %10.1f %9.0f\n", "q/k norm + RoPE", qk_ms * 1e3,
                2.0 * T * (heads + kv_heads) * d * 2 / (qk_ms * 1e-3) / 1e9);
    void* gout;
    CK(cudaMalloc(&gout, size_t(T) * heads * d * 2));
    OutputGateArgs o;
    o.attn = out, o.attn_bf16 = false, o.gate = qkv, o.gate_stride = width, o.gamma = dgamma, o.out = gout;
    o.tokens = T, o.width = heads * d;
    const float og_ms = median_ms([&] { CK(output_gate_run(o, nullptr)); }, 20);
    std::printf("%-22s %10.1f %9.0f\n", "output norm + gate", og_ms * 1e3,
                double(T) * heads * d * (4 + 2 + 2) / (og_ms * 1e-3) / 1e9);
    // The same ops at decode sizes (one token a sequence): latency, not bandwidth, is what they cost there. The
    // softmax layers' output gate reads a bf16 attention output and has no norm.
    std::printf("\nfused ops at decode\n");
    std::printf("%-30s %10s %9s\n", "op", "us", "GB/s");
    for (int rows : {1, 8, 64}) {
      LightningQkArgs qd = q;
      qd.tokens = rows;
      const float qd_ms = median_ms([&] { CK(lightning_qk_run(qd, nullptr)); }, 50);
      std::printf("%-30s %10.2f %9.0f\n", ("q/k norm + RoPE, " + std::to_string(rows) + " tok").c_str(), qd_ms * 1e3,
                  2.0 * rows * (heads + kv_heads) * d * 2 / (qd_ms * 1e-3) / 1e9);
    }
    for (int rows : {1, 8, 64})
      for (bool bf16_in : {false, true}) {
        OutputGateArgs od = o;
        od.tokens = rows, od.attn_bf16 = bf16_in, od.gamma = bf16_in ? nullptr : dgamma;
        const float od_ms = median_ms([&] { CK(output_gate_run(od, nullptr)); }, 50);
        const double bytes = double(rows) * heads * d * ((bf16_in ? 2 : 4) + 2 + 2) + (bf16_in ? 0 : heads * d * 4);
        std::printf("%-30s %10.2f %9.0f\n",
                    ((bf16_in ? "output gate (bf16), " : "output norm + gate, ") + std::to_string(rows) + " row").c_str(),
                    od_ms * 1e3, bytes / (od_ms * 1e-3) / 1e9);
      }
    dev_free(dpos, dgamma, gout);
  }
  dev_free(out2, qkv, out, state, dg);
  return 0;
}
