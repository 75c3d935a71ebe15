// executor: slurm. Each trial is one Slurm job: the daemon writes a batch script beside the trial file in the
// job's work dir (which the compute nodes must share), submits it with `sbatch` and the configured resources
// (slurm.sbatch_args, e.g. --gres=gpu:1) and a time limit from the trial timeout, stores the Slurm job id with
// the trial, and polls `squeue` until the job leaves the queue. The batch script runs the worker with its
// stdout, stderr and exit status going to files in the work dir, which the daemon then reads as it would read a
// local worker's run. Cancelling is `scancel`. Slurm's own end states (OUT_OF_MEMORY, TIMEOUT, NODE_FAIL,
// PREEMPTED, a CANCELLED nobody here asked for) become failure kinds (slurm_end_state). Trials outlive the
// daemon: a stopping daemon detaches from them and a restarted one re-attaches by the stored job id.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "daemon/executor.h"

namespace soartune::daemon {

// What a Slurm job state (squeue %T) means for a trial.
struct SlurmState {
  bool in_flight = false;                   // PENDING, RUNNING, COMPLETING, ...: keep waiting
  bool read_worker = false;                 // COMPLETED, FAILED: the worker's files say how it went
  bool cancelled = false;                   // CANCELLED: by the daemon (a cancel) or by someone else
  std::optional<FailureKind> failure;       // TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, ...
};
SlurmState slurm_end_state(std::string_view state);

class SlurmExecutor : public Executor {
 public:
  SlurmExecutor(std::string worker, SlurmConfig cfg) : worker_(std::move(worker)), cfg_(std::move(cfg)) {}
  ExecutorOutcome run(const TrialLaunch& t, TrialControl& control,
                      const std::function<void(int64_t)>& submitted) override;
  ExecutorOutcome attach(const TrialLaunch& t, int64_t scheduler_job_id, TrialControl& control) override;
  bool trials_outlive_daemon() const override { return true; }

 private:
  std::string tool(const char* name) const;
  ExecutorOutcome wait(const TrialLaunch& t, int64_t id, TrialControl& control);

  std::string worker_;
  SlurmConfig cfg_;
};

}  // namespace soartune::daemon
