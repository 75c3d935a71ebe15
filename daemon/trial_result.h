// What a finished worker process means for its trial: COMPLETE with metrics, or FAILED with a precise reason
// (crash by signal, out of memory, timeout, non-zero exit with the worker's JSON error, garbage on stdout, a
// result missing a tier).
#pragma once

#include <string>

#include "daemon/store.h"
#include "daemon/worker_process.h"
#include "search/scoring.h"

namespace soartune::daemon {

struct TrialOutcome {
  TrialStatus status = TrialStatus::kFailed;
  std::string error;           // the reason, for FAILED / CANCELLED
  std::string failure_kind;    // for the search's failure model: "timeout", "out of memory", "crash", "exit code N",
                               // "invalid config", "bad output"
};

// Fills `t` (status, metrics, error, log tail, result_json, engine build, device, peak memory) from the run.
TrialOutcome interpret_worker_run(const ProcessResult& run, double timeout_s, TrialRecord& t);

// The metrics the scorer needs, from a COMPLETE trial record.
search::TrialMetrics metrics_of(const TrialRecord& t);

}  // namespace soartune::daemon
