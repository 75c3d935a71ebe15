// Early stop in the runner: the decision it takes on each progress line of a running trial
// (core/worker_progress.h) under the job's `early_stop:` rule (daemon/early_stop_spec.h). The rule is search/early_stop.h's,
// measured on replay tables (docs/PERF.md): after the first tier with a 5% margin it made 0 false stops in 374.
//
// The decision compares the trial's best reachable score with the job's incumbent (its best COMPLETE
// full-fidelity trial) against the job's current best tier durations. No incumbent yet: no decision. The
// reference trials (the baseline) and screening runs of a multi-fidelity job (their shortened workloads do not
// compare with full runs) are never stopped; the runner does not ask for them.
#pragma once

#include <optional>

#include "core/worker_progress.h"
#include "daemon/scored_trials.h"
#include "daemon/store.h"
#include "search/early_stop.h"
#include "search/scoring.h"

namespace soartune::daemon {

// Whether to stop a running trial now, given its latest progress: the rule's facts when it must stop, nullopt to
// let it run on (no incumbent yet, too few tiers measured, every tier already measured, or it can still win).
std::optional<EarlyStopFacts> early_stop_verdict(const search::EarlyStopRule& rule, const search::ScoringSpec& scoring,
                                                 const WorkerProgress& progress, const ScoredTrials& trials);

// The tiers a progress line reports, as the store keeps them (the tiers of the race only, in its order).
std::vector<TierRecord> measured_tiers(const WorkerProgress& progress);

}  // namespace soartune::daemon
