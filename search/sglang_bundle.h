// The submission bundle's text: `prepare_env.sh` (SGLANG_SERVER_ARGS = the job's base flags + the tuned flags,
// each once, the whole line checked against the serving engine's flag list and the race's rules) and a README
// saying what was tuned, what was measured and what could not be mapped. The quantised checkpoint beside them
// is written by soartune-worker --write-checkpoint (the daemon runs it; daemon/bundle_export.h).
#pragma once

#include <string>
#include <vector>

#include "core/knob_value.h"
#include "core/status.h"
#include "search/launch_export.h"
#include "search/serving_engine.h"

namespace soartune::search {

// What the README reports about the exported trial.
struct BundleSummary {
  std::vector<std::string> measured;   // one line each: score, relative accuracy, tier durations
  std::string predicted_band;          // the planner's predicted official score band; empty: none given
};

struct BundleText {
  std::string prepare_env;             // prepare_env.sh
  std::string readme;                  // README.md
  std::vector<std::string> server_args;   // base + tuned, one argv token each
};

// Whether `launch` quantises any weights (then the bundle needs a quantised checkpoint).
bool quantises_weights(const Config& launch);

// `checkpoint_dir`: the bundle's directory holding the quantised checkpoint ("" when the config keeps 16-bit
// weights and the original model is served). Errors name the knob or the flag.
Result<BundleText> sglang_bundle(const Config& launch, const ExportSource& source, const ServingSpec& serving,
                                 const BundleSummary& summary, const std::string& checkpoint_dir);

}  // namespace soartune::search
