// Fidelity levels of a job (`multi_fidelity:` in the job spec, docs/FORMATS.md): what a level < 1 runs, the
// trial file at a level, and each level's reference trial.
//
// A level f < 1 is the job's workload shortened, deterministically: every request class keeps its input_len
// (prefill shapes, and the KV memory a long prompt needs, stay those of the full run) and gets
// ceil(f * count) requests of ceil(f * output_len) output tokens (at least 1 each); the accuracy set keeps its
// first ceil(f * samples) samples. The tiers (concurrency 1, 8, unlimited) are the same. Each level has its own
// reference trial (the reference config run at that level, writing reference-level<k>.json), because relative
// accuracy compares the same samples and a rung ranks durations of the same workload; the full level's
// reference is the job's trial 0, as without levels.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/knob_value.h"
#include "core/status.h"
#include "daemon/job_spec.h"
#include "daemon/scored_trials.h"

namespace soartune::daemon {

// Parses `multi_fidelity: {levels: [...], eta: N}` into spec->fidelity_levels / fidelity_eta. levels may be
// left out: eta^-(rungs-1) .. eta^-1, 1 with `rungs` (default 3). Every level below 1 must shorten the
// workload or the accuracy set relative to the level above it (else it costs as much and says less): the error
// names the level. Needs spec->workload and spec->accuracy resolved.
soartune::Status parse_multi_fidelity(const YAML::Node& n, JobSpec* spec);

// ceil(f * n) (to 1e-9, so 3 * (1/3) stays 1), at least 1.
int64_t shortened_count(int64_t n, double fidelity);
YAML::Node workload_at(const YAML::Node& workload, double fidelity);
YAML::Node accuracy_at(const YAML::Node& accuracy, double fidelity);

// The trial file of `launch` at `fidelity` (trial_yaml with the shortened workload and accuracy set, and a
// `fidelity:` key the worker reports back for the record).
std::string trial_yaml_at(const JobSpec& spec, const soartune::Config& launch, const ReferenceFile& ref,
                          double fidelity, const std::vector<std::string>& header = {});

// reference.json (full level) or reference-level<k>.json: the reference outputs of the job's level.
std::string reference_file_name(const JobSpec& spec, double fidelity);

// The lowest level below 1 that has no reference trial COMPLETE or RUNNING (nullopt: all have one, or the job
// has no levels). The runner starts these after the full reference and before any search trial.
std::optional<double> reference_level_missing(const JobSpec& spec, const ScoredTrials& trials);

}  // namespace soartune::daemon
