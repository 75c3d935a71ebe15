#include "daemon/executor_local.h"

#include "daemon/executor_slurm.h"

namespace soartune::daemon {

ExecutorOutcome LocalExecutor::run(const TrialLaunch& t, TrialControl& control,
                                   const std::function<void(int64_t)>& /*submitted*/) {
  ProcessSpec ps;
  // --progress: the worker's progress lines, which the early-stop rule reads (core/worker_progress.h).
  ps.argv = {worker_, "--trial", t.trial_file, "--progress"};
  ps.cwd = t.work_dir;
  ps.timeout_s = t.timeout_s;
  ps.env.emplace_back("SOARTUNE_DEVICE", t.device);
  if (t.device.rfind("cuda:", 0) == 0) ps.env.emplace_back("CUDA_VISIBLE_DEVICES", t.device.substr(5));
  else ps.address_space_limit_bytes = memory_limit_bytes_;
  ps.on_stdout_line = control.on_stdout_line;
  ExecutorOutcome o;
  o.process = run_process(ps, &control.cancel);
  return o;
}

ExecutorOutcome LocalExecutor::attach(const TrialLaunch& /*t*/, int64_t scheduler_job_id, TrialControl& /*control*/) {
  ExecutorOutcome o;
  o.process.spawn_error = "the local executor cannot re-attach to scheduler job " + std::to_string(scheduler_job_id);
  return o;
}

std::unique_ptr<Executor> make_executor(const DaemonConfig& cfg) {
  if (cfg.executor == "slurm") return std::make_unique<SlurmExecutor>(cfg.worker, cfg.slurm);
  return std::make_unique<LocalExecutor>(cfg.worker, static_cast<uint64_t>(cfg.worker_memory_limit_mb) << 20);
}

}  // namespace soartune::daemon
