// Fuzz target: a trial file as soartune-worker reads it (engine/worker/trial.h load_trial, docs/FORMATS.md
// section 3), followed by what the worker computes from it before loading a model (the workload's longest
// sequence and request count, which size the engine).
#include <spdlog/spdlog.h>

#include <cstdint>

#include "engine/worker/trial.h"
#include "scratch_dir.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);   // unknown keys are logged; thousands of inputs a second would flood
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = soartune::fuzz::scratch_dir().write("trial.yaml", data, size);
  auto trial = soartune::engine::worker::load_trial(path);
  if (trial.ok()) {
    (void)trial.value().workload.max_total_len();
    (void)trial.value().workload.total_requests();
  }
  return 0;
}
