// `export --format sglang-bundle`: the daemon writes a submission directory for one trial under its own work
// dir (never where a client says): prepare_env.sh and README.md (search/sglang_bundle.h) and, when the config
// quantises weights, the quantised checkpoint, written by a `soartune-worker --trial FILE --write-checkpoint
// DIR` child process (the daemon never links the engine), supervised with the trial timeout like a trial.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "daemon/daemon_config.h"
#include "daemon/job_spec.h"
#include "daemon/store.h"

namespace soartune::daemon {

struct WrittenFile {
  std::string path;        // relative to the bundle directory
  std::string abs_path;
  uint64_t size_bytes = 0;
};

struct WrittenBundle {
  std::string dir;                    // absolute, under <work_dir>/bundles/
  std::string readme;                 // README.md's text
  std::vector<WrittenFile> files;     // every file under dir, sorted by path
};

// Writes the bundle of `trial` (a COMPLETE trial of the job `spec`). Errors: kInvalidArgument naming the knob or
// flag that cannot be exported; kInternal when the worker cannot write the checkpoint (its error included).
// `predicted_band`: the planner's predicted official score band for the trial, empty when it gives none.
Result<WrittenBundle> write_sglang_bundle(const DaemonConfig& cfg, const JobSpec& spec, const TrialRecord& trial,
                                         const std::string& predicted_band);

}  // namespace soartune::daemon
