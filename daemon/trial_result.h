// What a finished worker process means for its trial: COMPLETE with metrics, or FAILED with its failure kind
// (a value, core/failure_kind.h) and a precise reason (crash by signal, out of memory, timeout, non-zero exit
// with the worker's JSON error, garbage on stdout, a result missing a tier or of the wrong shape).
#pragma once

#include <string>

#include "core/failure_kind.h"
#include "core/worker_result.h"
#include "daemon/store.h"
#include "daemon/worker_process.h"
#include "search/scoring.h"

namespace soartune::daemon {

struct TrialOutcome {
  TrialStatus status = TrialStatus::kFailed;
  FailureKind failure_kind = FailureKind::kNone;
  int failure_code = 0;        // the signal (kCrash, kOutOfMemory by SIGKILL) or the exit status (kExitCode)
  std::string error;           // the reason, for FAILED / CANCELLED
};

// Fills `t` (status, failure kind and code, metrics, error, log tail, result_json, engine build, device, peak
// memory, plans, env) from the run. Every string it stores is valid UTF-8.
TrialOutcome interpret_worker_run(const ProcessResult& run, double timeout_s, TrialRecord& t);

// One tier as the store keeps it, from the worker's measurement of it (its result, or a progress line).
TierRecord tier_record(const TierMeasurement& m);

// The metrics the scorer needs, from a COMPLETE trial record.
search::TrialMetrics metrics_of(const TrialRecord& t);

}  // namespace soartune::daemon
