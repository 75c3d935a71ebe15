// soartune-gptq-bench: how long GPTQ takes on a model's shapes (default synthetic:llama3-8b, W4 g128), every
// linear of every layer (q, k, v, o, gate, up, down; the lm_head with --lm-head) through the GPU solver, and one
// group of linears (--cpu-group, default one layer's q/k/v) through the CPU solver as well (Eigen, one thread), for
// the ratio and for a check that the two agree on real shapes. Weights and calibration activations are random (synthetic
// activations, timing only: the times do not depend on the values). What is timed is the solvers' work from host
// activations and 16-bit host weights to host codes and scales; the forward pass that makes each layer's
// activations in a real run (on the CPU, engine/gptq_quantize.cc) is not.
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "engine/gptq_quantize.h"
#include "engine/model_loader.h"
#include "kernels/numeric_formats.h"

namespace soartune::engine {
namespace {

void check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message.c_str());
    std::exit(1);
  }
}

// splitmix64: fast, deterministic in the seed and the index, so chunks fill in parallel.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline float uniform(uint64_t seed, uint64_t i) {   // in [-1, 1)
  return static_cast<float>(mix(seed * 0x100000001b3ull + i) >> 40) / static_cast<float>(1 << 23) - 1.f;
}

template <typename F>
void parallel_for(std::size_t n, F f) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  const std::size_t chunk = (n + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t i = t * chunk; i < std::min(n, (t + 1) * chunk); ++i) f(i);
    });
  for (auto& th : pool) th.join();
}

QuantizedLinear random_linear(int out, int in, uint64_t seed) {
  QuantizedLinear l;
  l.out = out;
  l.in = in;
  l.w16.resize(static_cast<std::size_t>(out) * in);
  parallel_for(l.w16.size(), [&](std::size_t i) { l.w16[i] = kernels::f32_to_bf16(0.03f * uniform(seed, i)); });
  return l;
}

std::vector<float> random_activations(int tokens, int in, uint64_t seed) {
  std::vector<float> x(static_cast<std::size_t>(tokens) * in);
  parallel_for(x.size(), [&](std::size_t i) { x[i] = uniform(seed, i); });
  return x;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Group {
  std::string name;
  std::vector<const QuantizedLinear*> linears;   // the layer's 16-bit templates
  const std::vector<float>* x;
  int in;
};

// One group on `solver` from fresh copies of the templates; returns the wall seconds of the solver's call.
double run_group(GptqSolver& solver, const Group& g, int tokens, int bits, int group_size, std::vector<QuantizedLinear>& out) {
  out.clear();
  for (const QuantizedLinear* l : g.linears) out.push_back(*l);
  std::vector<GptqLinear> jobs;
  for (QuantizedLinear& l : out) jobs.push_back({&l, bits});
  const auto t = std::chrono::steady_clock::now();
  check(solver.quantize_group(g.x->data(), tokens, g.in, jobs, group_size, GptqOptions{}), g.name.c_str());
  return seconds_since(t);
}

void print_stages(const char* who, const GptqStageSeconds& s, double wall) {
  std::printf("%-4s %3d hessians %8.3f s | cholesky %8.3f s | columns %8.3f s (%d linears) | copies %7.3f s | "
              "forward %7.3f s (%d products) | wall %8.3f s\n",
              who, s.hessians, s.hessian, s.cholesky, s.columns, s.linears, s.transfer, s.forward, s.forwards, wall);
}

// The calibration forward's products through each quantised linear of a group (what gptq_quantize_model runs
// between layers); returns their wall seconds.
double run_forward(GptqSolver& solver, const Group& g, int tokens, const std::vector<QuantizedLinear>& quantised) {
  std::vector<float> y;
  const auto t = std::chrono::steady_clock::now();
  for (const QuantizedLinear& l : quantised) {
    y.resize(static_cast<std::size_t>(tokens) * l.out);
    check(solver.forward(g.x->data(), tokens, l, y.data()), (g.name + " forward").c_str());
  }
  return seconds_since(t);
}

int run(int argc, char** argv) {
  CLI::App app{"soartune-gptq-bench: GPTQ quantisation time on a model's shapes, GPU and CPU solvers"};
  std::string model = "synthetic:llama3-8b", cpu_group = "qkv";
  int bits = 4, group_size = 128, samples = 48, tokens_per_sample = 48, layers = 0;
  bool lm_head = false;
  app.add_option("--model", model, "synthetic:<preset> whose shapes to use")->capture_default_str();
  app.add_option("--bits", bits, "4 or 8")->capture_default_str();
  app.add_option("--group", group_size, "weight_group_size (0: per output channel)")->capture_default_str();
  app.add_option("--samples", samples, "calibration sequences (the job default, quantization.calibration_samples)")
      ->capture_default_str();
  app.add_option("--tokens-per-sample", tokens_per_sample,
                 "tokens per sequence (default: the synthetic accuracy set's prompt_len 32 + continuation_len 16)")
      ->capture_default_str();
  app.add_option("--layers", layers, "layers to quantise (0: all of the model's)");
  app.add_flag("--lm-head", lm_head, "quantise the lm_head too (the default launch keeps it 16-bit)");
  app.add_option("--cpu-group", cpu_group, "group of layer 0 also timed on the CPU: qkv, o, gate_up, down or none")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (model.rfind("synthetic:", 0) != 0) {
    std::fprintf(stderr, "--model: %s is not synthetic:<preset>\n", model.c_str());
    return 2;
  }
  auto cfg_or = synthetic_config(model.substr(10));
  check(cfg_or.status(), "--model");
  const ModelConfig c = cfg_or.value();
  if (c.has_lightning()) {
    std::fprintf(stderr, "--model: %s has lightning layers; gptq is for Llama-family models\n", model.c_str());
    return 2;
  }
  if (layers <= 0 || layers > c.layers) layers = c.layers;
  const int tokens = samples * tokens_per_sample;
  auto gpu_or = make_cuda_gptq_solver(0);
  check(gpu_or.status(), "GPU solver");
  GptqSolver& gpu = *gpu_or.value();
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  const auto t_gen = std::chrono::steady_clock::now();
  const QuantizedLinear wq = random_linear(c.q_dim(), c.hidden, 1), wk = random_linear(c.kv_dim(), c.hidden, 2),
                        wv = random_linear(c.kv_dim(), c.hidden, 3), wo = random_linear(c.hidden, c.q_dim(), 4),
                        wg = random_linear(c.intermediate, c.hidden, 5), wu = random_linear(c.intermediate, c.hidden, 6),
                        wd = random_linear(c.hidden, c.intermediate, 7);
  const QuantizedLinear head = lm_head ? random_linear(c.vocab, c.hidden, 8) : QuantizedLinear{};
  const std::vector<float> x_hidden = random_activations(tokens, c.hidden, 11), x_q = random_activations(tokens, c.q_dim(), 12),
                           x_mlp = random_activations(tokens, c.intermediate, 13);
  const std::vector<Group> groups = {{"qkv", {&wq, &wk, &wv}, &x_hidden, c.hidden},
                                     {"o", {&wo}, &x_q, c.q_dim()},
                                     {"gate_up", {&wg, &wu}, &x_hidden, c.hidden},
                                     {"down", {&wd}, &x_mlp, c.intermediate}};
  std::printf("%s: %d layers (hidden %d, q %d, kv %d, intermediate %d, vocab %d), GPTQ W%d g%d, %d calibration "
              "sequences x %d tokens = %d tokens of synthetic activations (timing only); weights made in %.1f s\n",
              model.c_str(), layers, c.hidden, c.q_dim(), c.kv_dim(), c.intermediate, c.vocab, bits, group_size, samples,
              tokens_per_sample, tokens, seconds_since(t_gen));
  std::fflush(stdout);

  std::vector<QuantizedLinear> out, gpu_group_out;
  double gpu_wall = 0, gpu_group_wall = 0;
  GptqStageSeconds gpu_group_stages;
  for (int layer = 0; layer < layers; ++layer) {
    for (const Group& g : groups) {
      const GptqStageSeconds before = gpu.seconds();
      const double s = run_group(gpu, g, tokens, bits, group_size, out);
      gpu_wall += s + run_forward(gpu, g, tokens, out);
      // The group beside the CPU is timed warm, in the last layer: layer 0's first calls also pay for the cuBLAS
      // and cuSOLVER start-up, the kernels' loading and the solver's device buffers. Every layer has the same
      // weights and activations, so the codes are layer 0's too.
      if (layer + 1 == layers && g.name == cpu_group) {
        gpu_group_wall = s;
        gpu_group_out = out;
        const GptqStageSeconds& after = gpu.seconds();
        gpu_group_stages = {after.hessian - before.hessian, after.cholesky - before.cholesky, after.columns - before.columns,
                            after.transfer - before.transfer, after.hessians - before.hessians, after.linears - before.linears};
      }
    }
    if (layer == 0 || layer + 1 == layers) {
      std::printf("layer %d done, GPU wall so far %.3f s\n", layer, gpu_wall);
      std::fflush(stdout);
    }
  }
  if (lm_head) gpu_wall += run_group(gpu, {"lm_head", {&head}, &x_hidden, c.hidden}, tokens, bits, group_size, out);
  std::printf("\nGPU solver, every linear of %d layers%s, with the calibration forward's products:\n", layers,
              lm_head ? " and the lm_head" : "");
  print_stages("gpu", gpu.seconds(), gpu_wall);

  auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.name == cpu_group; });
  if (it != groups.end()) {
    auto cpu = make_cpu_gptq_solver();
    const double cpu_wall = run_group(*cpu, *it, tokens, bits, group_size, out);
    // Eigen here runs on one thread (no OpenMP in the build): the ratio is the GPU against one CPU core.
    std::printf("\ngroup %s on both solvers (gpu: the last layer's, warm; cpu: Eigen on one thread):\n", cpu_group.c_str());
    print_stages("gpu", gpu_group_stages, gpu_group_wall);
    print_stages("cpu", cpu->seconds(), cpu_wall);
    std::size_t codes = 0, differ = 0, scales_differ = 0;
    for (std::size_t k = 0; k < out.size(); ++k) {
      codes += out[k].q.size();
      for (std::size_t i = 0; i < out[k].q.size(); ++i) differ += out[k].q[i] != gpu_group_out[k].q[i];
      for (std::size_t i = 0; i < out[k].scales.size(); ++i) scales_differ += out[k].scales[i] != gpu_group_out[k].scales[i];
    }
    std::printf("cpu / gpu wall: %.1fx; codes differing %zu of %zu (%.4f%%), scales differing %zu\n", cpu_wall / gpu_group_wall,
                differ, codes, 100.0 * static_cast<double>(differ) / static_cast<double>(codes), scales_differ);
  }
  return 0;
}

}  // namespace
}  // namespace soartune::engine

int main(int argc, char** argv) { return soartune::engine::run(argc, argv); }
