// The trial's weight quantisation: quant_method rtn (engine/quantize.h) or gptq (engine/gptq_quantize.h) with
// the trial's calibration sequences, the GPTQ result kept in the quantised-weights cache (engine/quant_cache.h).
// The measuring run and --write-checkpoint both call it, so an exported checkpoint holds the measured weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/weights.h"
#include "engine/worker/trial.h"

namespace soartune::engine::worker {

struct QuantizeReport {
  std::string method;          // rtn | gptq
  std::string solver;          // gptq computed here: "cpu" | "cuda" (empty: rtn, or read from the cache)
  bool cached = false;         // gptq: read from the cache
  std::string cache_file;      // gptq: where it is (or was written); empty when no cache dir is known
  int calibration_sequences = 0;
  int held_out_skipped = 0;    // calibration rows left out because a measured row has the same prompt
  double seconds = 0;
};

// The rows GPTQ is calibrated on (prompt + continuation each), never one the accuracy is measured on.
struct CalibrationRows {
  std::vector<std::vector<int32_t>> sequences;
  int held_out_skipped = 0;
};
Result<CalibrationRows> calibration_sequences(const TrialSpec& trial, int vocab);

// `backend`: what the trial runs on, "cpu" or "cuda". On "cuda" GPTQ runs on the GPU (engine/cuda/gptq_cuda.cc)
// when a device can be used, else on the CPU; the report says which.
Result<QuantizeReport> quantize_for_trial(ModelWeights& w, const TrialSpec& trial, const std::string& backend);

}  // namespace soartune::engine::worker
