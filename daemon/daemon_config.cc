#include "daemon/daemon_config.h"

#include <unistd.h>

#include <filesystem>

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

namespace soartune::daemon {

namespace fs = std::filesystem;
using soartune::Status;

namespace {

std::string relative_to(const std::string& p, const fs::path& base) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return (base / p).lexically_normal().string();
}

}  // namespace

Status load_daemon_config(const std::string& path, DaemonConfig& cfg) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Status::Invalid("config: " + path + ": " + e.what());
  }
  if (root.IsNull()) return Status::Ok();
  if (!root.IsMap()) return Status::Invalid("config: " + path + " must be a YAML mapping");
  fs::path base = fs::absolute(path).parent_path();
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.Scalar();
      const YAML::Node& v = kv.second;
      if (key == "listen") cfg.listen = v.as<std::string>();
      else if (key == "port_file") cfg.port_file = relative_to(v.as<std::string>(), base);
      else if (key == "http_listen") {
        cfg.http_listen = v.as<std::string>();
        cfg.http_listen_set = true;
      } else if (key == "http_port_file") cfg.http_port_file = relative_to(v.as<std::string>(), base);
      else if (key == "web_dir") cfg.web_dir = relative_to(v.as<std::string>(), base);
      else if (key == "database") cfg.database = relative_to(v.as<std::string>(), base);
      else if (key == "worker") cfg.worker = relative_to(v.as<std::string>(), base);
      else if (key == "workloads_dir") cfg.workloads_dir = relative_to(v.as<std::string>(), base);
      else if (key == "work_dir") cfg.work_dir = relative_to(v.as<std::string>(), base);
      else if (key == "parallel_trials") cfg.parallel_trials = v.as<int>();
      else if (key == "devices") {
        if (!v.IsSequence()) return Status::Invalid("devices: must be a list such as [cpu] or [cuda:0, cuda:1]");
        cfg.devices.clear();
        for (const auto& d : v) cfg.devices.push_back(d.as<std::string>());
      } else if (key == "trial_timeout_s") cfg.trial_timeout_s = v.as<double>();
      else if (key == "log_level") cfg.log_level = v.as<std::string>();
      else if (key == "data_roots") {
        if (!v.IsSequence()) return Status::Invalid("data_roots: must be a list of directories");
        cfg.data_roots.clear();
        for (const auto& d : v) cfg.data_roots.push_back(relative_to(d.as<std::string>(), base));
      } else if (key == "tls_cert") cfg.security.tls_cert = relative_to(v.as<std::string>(), base);
      else if (key == "tls_key") cfg.security.tls_key = relative_to(v.as<std::string>(), base);
      else if (key == "tls_client_ca") cfg.security.tls_client_ca = relative_to(v.as<std::string>(), base);
      else if (key == "token_file") cfg.security.token_file = relative_to(v.as<std::string>(), base);
      else if (key == "insecure_listen_anywhere") cfg.security.insecure_listen_anywhere = v.as<bool>();
      else if (key == "submissions") {
        if (!v.IsMap()) return Status::Invalid("submissions: must be a mapping {per_day, timezone}");
        for (const auto& s : v) {
          const std::string k = s.first.Scalar();
          if (k == "per_day") cfg.submissions_per_day = s.second.as<int>();
          else if (k == "timezone") cfg.submissions_timezone = s.second.as<std::string>();
          else return Status::Invalid("submissions." + k + ": unknown field; allowed: per_day, timezone");
        }
      } else if (key == "executor") cfg.executor = v.as<std::string>();
      else if (key == "slurm") {
        if (!v.IsMap()) return Status::Invalid("slurm: must be a mapping {jobs, device, sbatch_args, poll_s, bin_dir}");
        for (const auto& s : v) {
          const std::string k = s.first.Scalar();
          if (k == "jobs") cfg.slurm.jobs = s.second.as<int>();
          else if (k == "device") cfg.slurm.device = s.second.as<std::string>();
          else if (k == "poll_s") cfg.slurm.poll_s = s.second.as<double>();
          else if (k == "bin_dir") cfg.slurm.bin_dir = relative_to(s.second.as<std::string>(), base);
          else if (k == "sbatch_args") {
            if (!s.second.IsSequence()) return Status::Invalid("slurm.sbatch_args: must be a list such as [--gres=gpu:1]");
            cfg.slurm.sbatch_args.clear();
            for (const auto& a : s.second) cfg.slurm.sbatch_args.push_back(a.as<std::string>());
          } else {
            return Status::Invalid("slurm." + k + ": unknown field; allowed: jobs, device, sbatch_args, poll_s, bin_dir");
          }
        }
      } else {
        return Status::Invalid(key + ": unknown field; allowed: listen, port_file, http_listen, http_port_file, web_dir, "
                               "database, worker, workloads_dir, work_dir, parallel_trials, devices, trial_timeout_s, "
                               "log_level, submissions, executor, slurm, tls_cert, tls_key, tls_client_ca, token_file, "
                               "insecure_listen_anywhere, data_roots, worker_memory_limit_mb");
      }
    }
  } catch (const YAML::Exception& e) {
    return Status::Invalid("config: " + path + ": " + e.what());
  }
  if (cfg.workloads_dir.empty()) cfg.workloads_dir = (base / "workloads").string();
  return Status::Ok();
}

Status finish_daemon_config(DaemonConfig& cfg, const std::string& exe_path, const std::string& config_path) {
  std::error_code ec;
  if (cfg.worker.empty()) cfg.worker = (fs::path(exe_path).parent_path() / "soartune-worker").string();
  if (cfg.web_dir.empty()) cfg.web_dir = (fs::path(exe_path).parent_path() / "web").string();
  if (cfg.workloads_dir.empty()) {
    cfg.workloads_dir = config_path.empty() ? "configs/workloads"
                                            : (fs::absolute(config_path).parent_path() / "workloads").string();
  }
  if (cfg.work_dir.empty()) cfg.work_dir = cfg.database + ".work";
  cfg.worker = fs::absolute(cfg.worker, ec).string();
  cfg.work_dir = fs::absolute(cfg.work_dir, ec).string();
  cfg.workloads_dir = fs::absolute(cfg.workloads_dir, ec).string();
  if (cfg.data_roots.empty()) {
    cfg.data_roots.push_back(fs::current_path(ec).string());
    if (!config_path.empty()) cfg.data_roots.push_back(fs::absolute(config_path, ec).parent_path().string());
  }
  for (std::string& r : cfg.data_roots) {
    r = fs::absolute(r, ec).lexically_normal().string();
    if (!fs::is_directory(r, ec)) spdlog::warn("data_roots: {} is not a directory (yet); nothing is read there", r);
  }
  cfg.data_roots.push_back(cfg.workloads_dir);
  if (cfg.parallel_trials < 1) return Status::Invalid("parallel_trials: must be >= 1");
  if (cfg.executor != "local" && cfg.executor != "slurm")
    return Status::Invalid("executor: '" + cfg.executor + "' is not one of local, slurm");
  if (cfg.executor == "slurm") {
    if (cfg.slurm.jobs < 1) return Status::Invalid("slurm.jobs: must be >= 1");
    if (!(cfg.slurm.poll_s > 0)) return Status::Invalid("slurm.poll_s: must be > 0");
    const std::string& d = cfg.slurm.device;
    if (d != "cpu" && d.rfind("cuda:", 0) != 0)
      return Status::Invalid("slurm.device: '" + d + "' is not cpu or cuda:<index>");
    // Slurm places each job: the daemon's slots are its jobs in flight, each telling the worker slurm.device.
    cfg.devices.assign(static_cast<size_t>(cfg.slurm.jobs), d);
    cfg.parallel_trials = cfg.slurm.jobs;
  }
  if (cfg.devices.empty()) return Status::Invalid("devices: must name at least one device (e.g. cpu)");
  for (size_t i = 0; i < cfg.devices.size(); ++i) {
    const std::string& d = cfg.devices[i];
    // "cpu:<n>" names extra CPU slots, for hosts with cores enough to time trials side by side.
    if (d != "cpu" && d.rfind("cpu:", 0) != 0 && d.rfind("cuda:", 0) != 0)
      return Status::Invalid("devices[" + std::to_string(i) + "]: '" + d + "' is not cpu, cpu:<n> or cuda:<index>");
    for (size_t j = 0; j < i && cfg.executor == "local"; ++j)
      if (cfg.devices[j] == d) return Status::Invalid("devices[" + std::to_string(i) + "]: " + d + " listed twice");
  }
  if (cfg.worker_memory_limit_mb < 0) return Status::Invalid("worker_memory_limit_mb: must be >= 0 (0: 80% of memory)");
  if (cfg.worker_memory_limit_mb == 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) cfg.worker_memory_limit_mb = static_cast<int64_t>(pages) * page / (1 << 20) * 4 / 5;
  }
  if (cfg.trial_timeout_s <= 0) return Status::Invalid("trial_timeout_s: must be > 0");
  if (spdlog::level::from_str(cfg.log_level) == spdlog::level::off && cfg.log_level != "off")
    return Status::Invalid("log_level: '" + cfg.log_level + "' is not one of trace, debug, info, warn, error, critical, off");
  if (auto b = search::SubmissionBudget::make(cfg.submissions_timezone, cfg.submissions_per_day, "submissions"); !b.ok())
    return b.status();
  if (!fs::exists(cfg.worker)) spdlog::warn("worker {} does not exist; trials will fail until it does", cfg.worker);
  return Status::Ok();
}

}  // namespace soartune::daemon
