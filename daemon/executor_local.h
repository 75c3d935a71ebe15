// The default executor: each trial's worker is a child process of the daemon on this host, in its own process
// group, killed at the trial timeout or on cancel (worker_process.h).
#pragma once

#include "daemon/executor.h"

namespace soartune::daemon {

class LocalExecutor : public Executor {
 public:
  // `memory_limit_bytes`: the address-space cap of each CPU worker (0: none); CUDA workers are never capped,
  // since the driver maps device memory into their address space.
  explicit LocalExecutor(std::string worker, uint64_t memory_limit_bytes = 0)
      : worker_(std::move(worker)), memory_limit_bytes_(memory_limit_bytes) {}
  ExecutorOutcome run(const TrialLaunch& t, TrialControl& control,
                      const std::function<void(int64_t)>& submitted) override;
  // A local worker dies with the daemon's process group or is killed at shutdown: nothing to attach to.
  ExecutorOutcome attach(const TrialLaunch& t, int64_t scheduler_job_id, TrialControl& control) override;
  bool trials_outlive_daemon() const override { return false; }

 private:
  std::string worker_;
  uint64_t memory_limit_bytes_ = 0;
};

}  // namespace soartune::daemon
