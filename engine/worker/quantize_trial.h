// The trial's weight quantisation: quant_method rtn (engine/quantize.h) or gptq (engine/gptq_quantize.h) with
// the trial's calibration sequences, the GPTQ result kept in the quantised-weights cache (engine/quant_cache.h).
// The measuring run and --write-checkpoint both call it, so an exported checkpoint holds the measured weights.
#pragma once

#include <string>

#include "core/status.h"
#include "engine/weights.h"
#include "engine/worker/trial.h"

namespace soartune::engine::worker {

struct QuantizeReport {
  std::string method;          // rtn | gptq
  bool cached = false;         // gptq: read from the cache
  std::string cache_file;      // gptq: where it is (or was written); empty when no cache dir is known
  int calibration_sequences = 0;
  double seconds = 0;
};

Result<QuantizeReport> quantize_for_trial(ModelWeights& w, const TrialSpec& trial);

}  // namespace soartune::engine::worker
