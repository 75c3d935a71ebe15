// The job spec (docs/FORMATS.md section 2): parsed and validated in full before anything is written, every
// error naming its field ("budget.trials: must be an integer in 1..100000"). Also writes the trial file
// (section 3) a worker runs, which is what `ExportConfig` returns too (without `reference:`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "daemon/quantization_spec.h"
#include "search/budget_day.h"
#include "search/early_stop.h"
#include "core/knob_value.h"
#include "search/scoring.h"
#include "search/serving_engine.h"
#include "search/space.h"
#include "core/status.h"

namespace soartune::daemon {

struct StopRule {
  double ei_below_pct = 0;     // stop when the strategy's expected improvement stays under this ...
  int rounds = 1;              // ... for this many consecutive asks
};

struct JobSpec {
  std::string name;
  std::string model;           // "hf:<absolute dir>" or "synthetic:<preset>"
  std::string backend = "auto";
  std::string strategy = "bayes";
  uint64_t seed = 1;
  int trial_budget = 20;       // including the reference trial
  std::optional<double> time_budget_s;
  std::optional<StopRule> stop_when;
  std::optional<int> parallel_trials;
  std::optional<double> trial_timeout_s;
  YAML::Node workload;         // resolved mapping {name, requests: [...]}, as the trial file carries it
  std::string workload_name;
  YAML::Node accuracy;         // mapping {set, samples, ...}; a .jsonl set has an absolute path
  YAML::Node layer_overrides;  // optional mapping, passed to the trial file
  search::ScoringSpec scoring;
  search::Space space;
  soartune::Config reference;    // the full reference config: catalogue defaults + `reference:` + `fixed:`
  soartune::Config fixed;        // held for every trial (also trial 0)
  bool warm_start = false;
  std::optional<search::SubmissionBudget> submissions;   // `submissions: {per_day, timezone}`
  std::optional<search::ServingSpec> serving;   // `serving: {engine, base_args}`: the bundle export's target
  QuantizationSpec quantization;   // `quantization:`: GPTQ calibration of every trial (quant_method gptq)
  bool accuracy_proxy = false;   // accuracy.model: accuracy measured on that trained model, durations on `model`
  std::vector<std::string> warnings;   // told at submission and with the job (e.g. a gate on random weights)
  // `multi_fidelity:` (daemon/fidelity.h): workload fractions ascending to 1, and the promotion ratio; empty: off.
  std::vector<double> fidelity_levels;
  int fidelity_eta = 3;
  // `early_stop:` (daemon/early_stop.h): stop a running trial its measured stages make hopeless; unset: off.
  std::optional<search::EarlyStopRule> early_stop;
};

// Documented ranges of the spec's durations (docs/FORMATS.md): beyond them a clock would overflow, not wait.
inline constexpr double kMaxTrialTimeoutS = 7 * 86400.0;
inline constexpr double kMaxTimeBudgetS = 30 * 86400.0;

struct SpecContext {
  std::string workloads_dir;   // where named workloads live (<name>.yaml)
  std::vector<std::string> data_roots;   // models, accuracy sets, workloads only under these (empty: anywhere)
};

// Parses and validates a job spec. kInvalidArgument naming the field on any problem.
soartune::Result<JobSpec> parse_job_spec(const std::string& yaml_text, const SpecContext& ctx);

// Trial config = reference overlaid with `fixed` and the suggestion (inactive space knobs take the reference).
soartune::Config trial_config(const JobSpec& spec, const soartune::Config& suggestion);
// The suggestion's view of a full trial config: only the space's parameters, inactive ones dropped.
soartune::Config space_view(const JobSpec& spec, const soartune::Config& full);

struct ReferenceFile {
  std::string write;           // this trial is the reference: save its outputs here
  std::string read;            // compare against these saved outputs
  std::string quant_cache;     // directory the job's trials share for quantised weights (GPTQ); empty: none
};

// The trial file (FORMATS section 3) for `launch`. `header` lines become leading comments.
std::string trial_yaml(const JobSpec& spec, const soartune::Config& launch, const ReferenceFile& ref,
                       const std::vector<std::string>& header = {});

// Warm-start key: trials of earlier jobs with the same key are prior observations.
std::string device_key(const JobSpec& spec, const std::string& device_class);

}  // namespace soartune::daemon
