// soartune-host-weights-bench: how long a trial's host-side weight preparation takes, the part of a worker's fixed
// cost that comes before any device work: the synthetic model's weights made on the host (`load_model`, as the
// worker loads `synthetic:<preset>`) and their round-to-nearest quantisation (`quantize_model`, the trial's weight
// bits and group). Each repetition starts from nothing (a fresh process's state but for the allocator's free lists)
// and prints both times; the median of the repetitions last. CPU only; no device is touched.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/launch_config.h"
#include "engine/model_loader.h"
#include "engine/quantize.h"

namespace soartune::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int run(int argc, char** argv) {
  CLI::App app{"soartune-host-weights-bench: a synthetic model's weights made and RTN-quantised on the host, timed"};
  std::string model = "synthetic:llama3-8b";
  int bits = 8, group = 128, reps = 3;
  uint64_t seed = 1;
  app.add_option("--model", model, "synthetic:<preset>")->capture_default_str();
  app.add_option("--bits", bits, "weight bits: 16 (no quantisation), 8 or 4")->check(CLI::IsMember({16, 8, 4}))->capture_default_str();
  app.add_option("--group", group, "weight group size (0 = per output channel)")->capture_default_str();
  app.add_option("--reps", reps, "repetitions")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--seed", seed, "weights seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (model.rfind("synthetic:", 0) != 0) {
    std::fprintf(stderr, "--model: %s is not synthetic:<preset>\n", model.c_str());
    return 2;
  }
  LaunchConfig launch;
  launch.weight_bits = bits;
  launch.weight_group_size = group;
  std::vector<double> synth, rtn;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto w = load_model(model, seed);
    if (!w.ok()) {
      std::fprintf(stderr, "load_model: %s\n", w.status().message.c_str());
      return 1;
    }
    synth.push_back(seconds_since(t0));
    const auto t1 = std::chrono::steady_clock::now();
    if (Status s = quantize_model(w.value(), launch); !s.ok()) {
      std::fprintf(stderr, "quantize_model: %s\n", s.message.c_str());
      return 1;
    }
    rtn.push_back(seconds_since(t1));
    std::printf("rep %d: %s weights made in %.3f s, RTN W%d g%d in %.3f s\n", r, model.c_str(), synth.back(), bits,
                group, rtn.back());
    std::fflush(stdout);
  }
  std::printf("median of %d: weights %.3f s, RTN %.3f s\n", reps, median(synth), median(rtn));
  return 0;
}

}  // namespace
}  // namespace soartune::engine

int main(int argc, char** argv) { return soartune::engine::run(argc, argv); }
