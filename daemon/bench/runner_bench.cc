// runner_bench: what the job runner itself costs per trial, apart from the worker. A job of N trials (default
// 300) runs against a real SQLite store with a stand-in worker (a shell script that prints one canned result
// and exits), one trial at a time, and a watcher subscribed from the start. Reported:
//   - spawn: the mean wall time of the stand-in worker run alone (run_process, no runner), the floor;
//   - wall per trial: the job's wall time / N (the floor included: the figure to compare across builds when
//     the floor is noisy);
//   - runner overhead per completed trial: (the job's wall time - N * spawn) / N, for the whole job and for
//     the last quarter (where a runner that rescans the job pays most);
//   - gap: from one trial's recorded end (finished_ms) to the next one's start (started_ms), the runner's own
//     time between two workers (interpreting, storing, scoring, publishing, asking, writing the next trial
//     file), mean and p99 over the job: unlike the figures above it does not depend on the floor;
//   - watch latency: from the moment a trial is recorded finished (its finished_ms) to the moment the
//     watcher holds the event, p50 / p99 / max over the job's TRIAL_FINISHED events.
// Usage: runner_bench [--trials N] [--keep DIR] [--wide]. Prints one line of key=value figures. --wide adds a
// second knob (max_prefill_tokens) to the space, which has only 1024 configs without it: for jobs of more trials
// (the kept store of a 10,000-trial job is what daemon/bench/dashboard_load.mjs opens).
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/job_manager.h"
#include "daemon/store.h"
#include "daemon/worker_process.h"

namespace fs = std::filesystem;
using namespace soartune::daemon;

namespace {

constexpr const char* kResult =
    R"({"ok": true, "backend": "cpu", "device": "cpu", "engine_build": "bench",)"
    R"( "tiers": [{"tier": "c1", "concurrency": 1, "duration_s": 1.5},)"
    R"( {"tier": "c8", "concurrency": 8, "duration_s": 0.5}, {"tier": "cinf", "concurrency": 0, "duration_s": 0.25}],)"
    R"( "accuracy": {"metric": "fidelity", "relative_pct": 99.5}, "peak_memory_bytes": 1})";

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 300;
  bool wide = false;
  std::string keep;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--trials" && i + 1 < argc) trials = std::atoi(argv[++i]);
    else if (a == "--wide") wide = true;
    else if (a == "--keep" && i + 1 < argc) keep = argv[++i];
    else {
      std::fprintf(stderr, "usage: runner_bench [--trials N] [--keep DIR] [--wide]\n");
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);
  std::string dir = keep;
  if (dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "runner-bench-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) return 1;
    dir = tmpl;
  }
  fs::create_directories(dir);
  const std::string result = (fs::path(dir) / "result.json").string();
  std::ofstream(result) << kResult << "\n";
  const std::string worker = (fs::path(dir) / "worker.sh").string();
  std::ofstream(worker) << "#!/bin/sh\ncat " << result << "\n";
  ::chmod(worker.c_str(), 0755);

  // The floor: the stand-in worker alone.
  const int spawn_runs = 200;
  const auto s0 = std::chrono::steady_clock::now();
  for (int i = 0; i < spawn_runs; ++i) {
    ProcessSpec ps;
    ps.argv = {worker, "--trial", "x"};
    run_process(ps);
  }
  const double spawn_s = seconds(std::chrono::steady_clock::now() - s0) / spawn_runs;

  DaemonConfig cfg;
  cfg.database = (fs::path(dir) / "bench.db").string();
  cfg.work_dir = (fs::path(dir) / "work").string();
  cfg.workloads_dir = dir;
  cfg.worker = worker;
  auto store = Store::open(cfg.database);
  if (!store.ok()) {
    std::fprintf(stderr, "store: %s\n", store.status().message.c_str());
    return 1;
  }
  JobManager jobs(cfg, std::move(store).value());
  if (!jobs.start().ok()) return 1;
  const std::string spec = "model: synthetic:tiny\nstrategy: random\nseed: 1\n"
                           "workload: {requests: [{input_len: 4, output_len: 4, count: 1}]}\n"
                           "budget: {trials: " + std::to_string(trials) + "}\n"
                           "space: {max_running_requests: {type: int, low: 1, high: 1024}" +
                           std::string(wide ? ", max_prefill_tokens: {type: int, low: 16, high: 4096}" : "") + "}\n";
  const auto t0 = std::chrono::steady_clock::now();
  auto job = jobs.submit(spec);
  if (!job.ok()) {
    std::fprintf(stderr, "submit: %s\n", job.status().message.c_str());
    return 1;
  }
  auto watcher = jobs.watch(job.value().job.id);
  if (!watcher.ok()) return 1;
  std::vector<double> latency_ms;
  std::vector<std::chrono::steady_clock::time_point> finished_at;
  bool done = false;
  while (!done) {
    std::optional<JobEventData> e = watcher.value()->pop(60000);
    if (!e) {
      std::fprintf(stderr, "no event for 60 s\n");
      return 1;
    }
    if (e->kind == EventKind::kTrialFinished || e->kind == EventKind::kTrialFailed) {
      finished_at.push_back(std::chrono::steady_clock::now());
      if (e->trial) latency_ms.push_back(static_cast<double>(now_ms() - e->trial->finished_ms));
    }
    done = e->kind == EventKind::kJobFinished;
  }
  const double wall_s = seconds(std::chrono::steady_clock::now() - t0);
  const int n = static_cast<int>(finished_at.size());
  const int q = n / 4;
  double tail_overhead_ms = 0;
  if (q > 1) tail_overhead_ms = (seconds(finished_at[n - 1] - finished_at[n - 1 - q]) / q - spawn_s) * 1000;
  std::vector<double> gap_ms;
  if (auto ts = jobs.trials(job.value().job.id); ts.ok())
    for (size_t i = 1; i < ts.value().size(); ++i)
      gap_ms.push_back(static_cast<double>(ts.value()[i].started_ms - ts.value()[i - 1].finished_ms));
  double gap_sum = 0;
  for (double g : gap_ms) gap_sum += g;
  auto v = jobs.get_job(job.value().job.id);
  std::printf("trials=%d state=%s spawn_ms=%.2f wall_s=%.2f wall_per_trial_ms=%.2f overhead_per_trial_ms=%.2f "
              "overhead_last_quarter_ms=%.2f gap_ms_mean=%.2f p99=%.1f watch_latency_ms_p50=%.1f p99=%.1f max=%.1f\n",
              n, v.ok() ? to_string(v.value().job.state) : "?", spawn_s * 1000, wall_s, wall_s / std::max(1, n) * 1000,
              (wall_s / std::max(1, n) - spawn_s) * 1000, tail_overhead_ms,
              gap_ms.empty() ? 0.0 : gap_sum / static_cast<double>(gap_ms.size()), quantile(gap_ms, 0.99),
              quantile(latency_ms, 0.5),
              quantile(latency_ms, 0.99), quantile(latency_ms, 1.0));
  jobs.shutdown();
  if (keep.empty()) fs::remove_all(dir);
  return 0;
}
