// The daemon's settings: configs/daemon.yaml, then command-line flags on top (see soartuned_main.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/listen_security.h"
#include "search/budget_day.h"
#include "core/status.h"

namespace soartune::daemon {

// executor: slurm. Each trial is one Slurm job (sbatch); its trial file, stdout, stderr and exit status live in
// the daemon's work dir, which must be on a filesystem the compute nodes share.
struct SlurmConfig {
  int jobs = 1;                            // Slurm jobs in flight at once (the daemon's trial slots)
  std::string device = "cpu";              // what the worker is told it runs on ("cuda:0": the GPU Slurm gave it)
  std::vector<std::string> sbatch_args;    // e.g. [--gres=gpu:1, --partition=gpu, --cpus-per-task=16]
  double poll_s = 2;                       // how often a running job's state is asked of Slurm
  std::string bin_dir;                     // where sbatch, squeue and scancel are; empty: PATH
};

struct DaemonConfig {
  std::string listen = "127.0.0.1:50051";   // port 0: pick a free port (reported in port_file and the log)
  std::string port_file;                    // where the bound port is written, if set
  // The dashboard (HTTP, loopback only). A default address that is taken leaves the daemon without a dashboard
  // (a warning), so a second daemon on a host still starts; an address set by config or flag must bind.
  std::string http_listen = "127.0.0.1:8700";   // "off": no dashboard; port 0: pick a free port
  bool http_listen_set = false;
  std::string http_port_file;               // where the bound HTTP port is written, if set
  std::string web_dir;                      // the dashboard's static files; default: web/ beside soartuned
  std::string database = "soartune.db";
  std::string worker;                       // default: soartune-worker beside soartuned
  std::string workloads_dir;                // default: workloads/ beside the config file
  std::string work_dir;                     // default: <database>.work/
  int parallel_trials = 1;
  std::vector<std::string> devices = {"cpu"};   // one trial per device at a time: "cpu", "cpu:1", "cuda:0", ...
  double trial_timeout_s = 600;
  std::string log_level = "info";
  int submissions_per_day = search::kDefaultSubmissionsPerDay;
  std::string submissions_timezone = search::kDefaultBudgetTimeZone;
  std::string executor = "local";           // local: worker processes on this host; slurm: one Slurm job per trial
  SlurmConfig slurm;
  // Job specs may name models, accuracy sets and workloads only under these (symlinks resolved). Default:
  // the working directory and the config file's directory; the workloads directory is always one.
  std::vector<std::string> data_roots;
  // Address-space cap of each CPU worker, MiB, so a runaway trial fails alone instead of the machine swapping
  // or the OOM killer picking the daemon. 0: 80% of the machine's memory. CUDA workers are not capped: the
  // driver maps device memory into their address space.
  int64_t worker_memory_limit_mb = 0;
  ListenSecurity security;                  // TLS, token; off-loopback rule (daemon/listen_security.h)
};

// Reads `path` (YAML) into `cfg`; unknown keys and bad values are errors naming the key. Relative paths in
// the file are relative to the file's directory.
soartune::Status load_daemon_config(const std::string& path, DaemonConfig& cfg);
// Fills the defaults that depend on where things are (worker beside `exe_path`, work dir beside the database),
// and checks the whole config.
soartune::Status finish_daemon_config(DaemonConfig& cfg, const std::string& exe_path, const std::string& config_path);

}  // namespace soartune::daemon
