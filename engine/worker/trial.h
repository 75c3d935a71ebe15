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
};

struct TrialSpec {
  std::string model;
  std::string backend = "auto";      // auto | cpu | cuda
  uint64_t seed = 1;
  LaunchConfig launch;
  Workload workload;
  std::vector<int> tiers = {1, 8, 0};
  AccuracySpec accuracy;
  std::string reference_write, reference_read;
};

// Errors are kInvalidArgument "<field>: <what>" (field as in the file: launch.kv_cache_dtype, ...).
Result<TrialSpec> load_trial(const std::string& path);

}  // namespace soartune::engine::worker
