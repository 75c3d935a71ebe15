// The job spec's `quantization:` section (docs/FORMATS.md section 2): how quant_method gptq is calibrated in
// every trial of the job. Carried to the worker in the trial file's `calibration:` and part of the
// quantised-weights cache key there, so two calibrations never share cached weights.
//
//   quantization:
//     calibration_set: accuracy     # accuracy (the accuracy set's rows after the measured ones) | a .jsonl path
//     calibration_samples: 48       # sequences (prompt + continuation), 1..4096
//     damp_pct: 10                  # Hessian damping, percent of the mean of its diagonal, (0, 100]
//
// The defaults are the measured best on tiny-llama-bpe4k W4 g128 (docs/PERF.md, GPTQ section). Whatever the
// set, the worker never calibrates on a row whose prompt is one the accuracy is measured on.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/status.h"

namespace soartune::daemon {

inline constexpr int kDefaultCalibrationSamples = 48;
inline constexpr double kDefaultDampPct = 10.0;
inline constexpr int kMaxCalibrationSamples = 4096;

struct QuantizationSpec {
  std::string calibration_set;          // empty: "accuracy"; else the .jsonl file's resolved absolute path
  int calibration_samples = kDefaultCalibrationSamples;
  double damp_pct = kDefaultDampPct;
};

// Parses `quantization:` (absent or null: the defaults); a file set must lie under `data_roots`. Errors are
// kInvalidArgument (kPermissionDenied outside the roots) naming the field and the allowed values.
soartune::Result<QuantizationSpec> parse_quantization(const YAML::Node& n, const std::vector<std::string>& data_roots,
                                                      const std::string& field = "quantization");

// The trial file's `calibration:` mapping for `q` (section 3), with the job's quantised-weights cache directory
// when it has one.
void emit_calibration(YAML::Emitter& e, const QuantizationSpec& q, const std::string& cache_dir);

}  // namespace soartune::daemon
