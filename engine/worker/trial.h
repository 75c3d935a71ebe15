// The trial file (docs/FORMATS.md section 3) as the worker reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/launch_config.h"
#include "core/status.h"
#include "engine/workload.h"

namespace soartune::engine::worker {

struct AccuracySpec {
  std::string set = "synthetic";     // "synthetic" or a .jsonl path
  int samples = 16;
  int prompt_len = 32;               // synthetic only
  int continuation_len = 16;         // synthetic (and .jsonl sets without continuation_ids)
  // "hf:<dir>": accuracy is measured on this trained model with the trial's launch config (a proxy for a
  // model whose own weights are synthetic), while durations come from `model`. Empty: on `model` itself.
  std::string model;
};

// Calibration of quant_method gptq: the accuracy set's rows after the `accuracy.samples` measured ones (never a
// measured row), or a named .jsonl set (its first `samples` rows).
struct CalibrationSpec {
  std::string set;                   // empty: the accuracy set, after its measured rows; else a .jsonl path
  int samples = 48;                  // sequences (prompt + continuation); the job default (daemon/quantization_spec.h)
  double damp_pct = 10.0;            // Hessian damping, percent of the mean of its diagonal (the job default)
  std::string cache_dir;             // quantised weights kept per (model, method, bits, groups, overrides,
                                     // calibration); empty: no cache (the daemon names one per job)
};

struct TrialSpec {
  std::string model;
  std::string backend = "auto";      // auto | cpu | cuda
  uint64_t seed = 1;
  LaunchConfig launch;
  Workload workload;
  std::vector<int> tiers = {1, 8, 0};
  AccuracySpec accuracy;
  CalibrationSpec calibration;
  std::string reference_write, reference_read;
};

// Errors are kInvalidArgument "<field>: <what>" (field as in the file: launch.kv_cache_dtype, ...).
Result<TrialSpec> load_trial(const std::string& path);

}  // namespace soartune::engine::worker
