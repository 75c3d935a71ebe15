// Why a trial did not complete, as a value: computed once where the worker's run is interpreted
// (daemon/trial_result.cc), stored as a column, sent in the API, and read by the search's failure model.
#pragma once

#include <optional>
#include <string_view>

namespace soartune {

enum class FailureKind {
  kNone,            // the trial completed (or is still running)
  kInvalidConfig,   // the worker refused the config or the model (exit 2 with its JSON error)
  kOutOfMemory,     // the worker said so, or it was SIGKILLed by someone other than the daemon
  kCrash,           // killed by a signal (failure code: the signal number)
  kTimeout,         // no result within the trial timeout; the daemon killed it
  kExitCode,        // a non-zero exit not otherwise explained (failure code: the exit status)
  kBadOutput,       // exited 0 but its stdout is not a well-typed result
  kWorkerError,     // the worker reported a failure of its own (ok: false) that is none of the above
  kNotStarted,      // the worker process could not be started
  kCancelled,       // killed on purpose: CancelJob or the daemon shutting down
  kRestart,         // left RUNNING when the daemon died; failed on restart
  kUnknown,         // recorded before failure kinds were stored
  kNodeFailure,     // the scheduler lost the node (Slurm NODE_FAIL, BOOT_FAIL) or the job with it
  kPreempted,       // the scheduler took the node back for other work (Slurm PREEMPTED)
};

// "invalid_config", "out_of_memory", ...; "" for kNone. The names the store and the JSON API use.
const char* to_string(FailureKind k);
// Inverse of to_string; nullopt for anything else.
std::optional<FailureKind> failure_kind_from_string(std::string_view s);
// Whether the failure says something about the config that ran (so the failure model should learn from it):
// true for what the config can cause (invalid, out of memory, crash, timeout, bad output, exit code, worker
// error; unknown counts too, as before kinds were stored); false for what happened to the run from outside
// (not started, cancelled, daemon restart, node failure, preemption).
bool is_about_the_config(FailureKind k);

}  // namespace soartune
