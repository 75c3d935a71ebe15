// Where a trial's worker runs. The job manager decides what to run and records what came of it; an executor
// only starts one worker for one trial, waits for it, and reports its run as the worker process's result
// (stdout, stderr tail, exit status) plus, when a scheduler ended it, the scheduler's verdict as a failure kind.
//
// local (the default): a child process of the daemon (worker_process.h). slurm: one Slurm job per trial
// (executor_slurm.h); such trials outlive the daemon, so a restarted daemon re-attaches to them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/failure_kind.h"
#include "daemon/daemon_config.h"
#include "daemon/worker_process.h"

namespace soartune::daemon {

// One trial to run: everything an executor needs, nothing about the search.
struct TrialLaunch {
  std::string job_id;
  int64_t number = 0;
  std::string trial_file;     // the worker's input (absolute path, in the job's work dir)
  std::string work_dir;       // the job's work dir: the worker's cwd, where its reference file lives
  std::string device;         // SOARTUNE_DEVICE for the worker: "cpu", "cuda:0", ...
  double timeout_s = 0;
};

struct ExecutorOutcome {
  ProcessResult process;                    // the worker's run, read as a local run (trial_result.h)
  std::optional<FailureKind> ended_by;      // the scheduler ended the run, for this reason, before the worker did
  std::string reason;                       // with ended_by: what the scheduler said
  bool detached = false;                    // the daemon stopped waiting; the trial runs on without it
};

// How the job manager steers a running trial from another thread.
struct TrialControl {
  CancelFlag cancel;                        // kill it (CancelJob, or the daemon shutting down a local run)
  std::atomic<bool> detach{false};          // stop waiting, leave it running (only where trials outlive the daemon)
  // Each line the worker prints on stdout, as it arrives (local: from its pipe; slurm: from its stdout file,
  // read at each poll), on the executor's thread; unset: nobody reads the worker while it runs. Set before run.
  std::function<void(std::string_view line)> on_stdout_line;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Starts the trial and blocks until it ends (or is detached). `submitted` gets the scheduler's job id as soon
  // as there is one, so it can be stored before anything else can go wrong.
  virtual ExecutorOutcome run(const TrialLaunch& t, TrialControl& control,
                              const std::function<void(int64_t scheduler_job_id)>& submitted) = 0;
  // Waits for a trial an earlier daemon started as `scheduler_job_id`.
  virtual ExecutorOutcome attach(const TrialLaunch& t, int64_t scheduler_job_id, TrialControl& control) = 0;
  // Whether trials keep running when the daemon stops: then a stopping daemon detaches instead of killing them,
  // and a starting one re-attaches instead of failing them.
  virtual bool trials_outlive_daemon() const = 0;
};

// The executor the config names (cfg.executor: local | slurm); the config is already checked.
std::unique_ptr<Executor> make_executor(const DaemonConfig& cfg);

}  // namespace soartune::daemon
