// daemon_load: soartuned under many clients. Starts a real soartuned (its own database in a temporary directory,
// the real soartune-worker) running a CPU job (synthetic:tiny, random search, more trials than the run lasts),
// then N concurrent clients, each on its own channel, loop for S seconds over the calls a user's CLI and
// dashboard make: list (ListJobs, ListTrials of the job), show (GetTrial of a trial the list returned, GetJob) and
// watch (WatchJob until its first event, the snapshot). Reported: errors per call type (any non-OK status; the
// first few quoted), p50 / p99 / max latency per call type, calls per second, and soartuned's resident memory
// (VmRSS) sampled every second: at the start of the load, at its end, and the peak.
// Usage: daemon_load --soartuned PATH --worker PATH [--clients 200] [--seconds 60] [--workloads-dir DIR]
// Exit status 1 when any call failed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "daemon/logged_process.h"
#include "soartune/v1/tuner.grpc.pb.h"

namespace fs = std::filesystem;
namespace pb = ::soartune::v1;
using soartune::daemon::spawn_logged;

namespace {

constexpr const char* kJob =
    "name: load\nmodel: synthetic:tiny\nbackend: cpu\nstrategy: random\nseed: 7\n"
    "budget: {trials: 100000}\ntrial_timeout_s: 120\n"
    "workload: {name: load, requests: [{name: a, input_len: 16, output_len: 8, count: 4}]}\n"
    "accuracy: {set: synthetic, samples: 2, prompt_len: 8, continuation_len: 4}\n"
    "space:\n  weight_bits: {type: choice, values: [16, 8, 4]}\n"
    "  max_running_requests: {type: pow2, low: 1, high: 16}\n";

const std::vector<std::string> kCalls = {"ListJobs", "ListTrials", "GetTrial", "GetJob", "WatchJob"};

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

// VmRSS of `pid` in MiB, 0 when it cannot be read.
double rss_mib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return 0;
}

struct Stats {
  std::mutex mu;
  std::map<std::string, std::vector<double>> latency_ms;
  std::map<std::string, int> errors;
  std::vector<std::string> first_errors;
  void add(const std::string& call, double ms, const grpc::Status& s) {
    std::lock_guard<std::mutex> l(mu);
    latency_ms[call].push_back(ms);
    if (!s.ok()) {
      ++errors[call];
      if (first_errors.size() < 5)
        first_errors.push_back(call + ": " + std::to_string(s.error_code()) + " " + s.error_message());
    }
  }
};

// Every client call's deadline: far above any latency the load produces, so a slow answer is measured, not lost.
void set_deadline(grpc::ClientContext* c) {
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
}

void client_loop(const std::string& addr, const std::string& job, Clock::time_point end, unsigned seed, Stats* stats) {
  auto stub = pb::Tuner::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  std::mt19937 rng(seed);
  // One unary call of type `call` on a fresh context; `rpc(context)` makes it. Only the call itself is timed.
  auto timed = [stats](const char* call, auto rpc) {
    grpc::ClientContext c;
    set_deadline(&c);
    const auto t0 = Clock::now();
    const grpc::Status s = rpc(&c);
    stats->add(call, ms_since(t0), s);
  };
  pb::ListJobsRequest list_jobs;
  pb::ListTrialsRequest list_trials;
  list_trials.set_job_id(job);
  list_trials.set_order_by("-score");
  list_trials.set_page_size(100);
  pb::GetJobRequest get_job;
  get_job.set_job_id(job);
  while (Clock::now() < end) {
    pb::ListJobsResponse jobs;
    timed("ListJobs", [&](grpc::ClientContext* c) { return stub->ListJobs(c, list_jobs, &jobs); });
    pb::ListTrialsResponse trials;
    timed("ListTrials", [&](grpc::ClientContext* c) { return stub->ListTrials(c, list_trials, &trials); });
    if (trials.trials_size() > 0) {
      pb::GetTrialRequest get_trial;
      get_trial.set_job_id(job);
      get_trial.set_number(trials.trials(std::uniform_int_distribution<int>(0, trials.trials_size() - 1)(rng)).number());
      pb::Trial trial;
      timed("GetTrial", [&](grpc::ClientContext* c) { return stub->GetTrial(c, get_trial, &trial); });
    }
    pb::Job got_job;
    timed("GetJob", [&](grpc::ClientContext* c) { return stub->GetJob(c, get_job, &got_job); });
    {
      grpc::ClientContext c;
      set_deadline(&c);
      pb::WatchJobRequest req;
      req.set_job_id(job);
      auto t0 = Clock::now();
      auto reader = stub->WatchJob(&c, req);
      pb::JobEvent e;
      const bool got = reader->Read(&e);
      const double ms = ms_since(t0);
      c.TryCancel();
      grpc::Status s = reader->Finish();
      // The client ends the stream after the snapshot: CANCELLED is what that leaves, not an error.
      if (got && s.error_code() == grpc::StatusCode::CANCELLED) s = grpc::Status::OK;
      if (!got && s.ok()) s = grpc::Status(grpc::StatusCode::UNKNOWN, "stream ended without a snapshot event");
      stats->add("WatchJob", ms, s);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string soartuned, worker, workloads_dir = "configs/workloads";
  int clients = 200, seconds = 60;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--soartuned") soartuned = next();
    else if (a == "--worker") worker = next();
    else if (a == "--workloads-dir") workloads_dir = next();
    else if (a == "--clients") clients = std::atoi(next().c_str());
    else if (a == "--seconds") seconds = std::atoi(next().c_str());
    else {
      std::fprintf(stderr, "usage: daemon_load --soartuned PATH --worker PATH [--clients N] [--seconds S] "
                           "[--workloads-dir DIR]\n");
      return 2;
    }
  }
  if (soartuned.empty() || worker.empty() || clients < 1 || seconds < 1) {
    std::fprintf(stderr, "daemon_load: --soartuned and --worker are required; --clients and --seconds >= 1\n");
    return 2;
  }
  std::string tmpl = (fs::temp_directory_path() / "daemon-load-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) return 1;
  const fs::path dir = tmpl;
  const std::string port_file = (dir / "port").string(), log = (dir / "soartuned.log").string();
  std::vector<std::string> args = {soartuned, "--port", "0", "--port-file", port_file, "--database",
                                   (dir / "load.db").string(), "--work-dir", (dir / "work").string(),
                                   "--workloads-dir", workloads_dir, "--worker", worker, "--http-listen",
                                   "127.0.0.1:0"};
  const pid_t pid = spawn_logged(args, log);
  if (pid < 0) {
    std::fprintf(stderr, "daemon_load: cannot start %s\n", soartuned.c_str());
    return 1;
  }
  int port = 0;
  for (int i = 0; i < 400 && port == 0; ++i) {
    std::ifstream in(port_file);
    if (!(in >> port)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto stop_daemon = [&] {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  };
  if (port == 0) {
    std::fprintf(stderr, "daemon_load: soartuned did not report a port; its log: %s\n", log.c_str());
    stop_daemon();
    return 1;
  }
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  auto stub = pb::Tuner::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  std::string job;
  {
    grpc::ClientContext c;
    pb::SubmitJobRequest req;
    req.set_spec_yaml(kJob);
    pb::Job out;
    grpc::Status s = stub->SubmitJob(&c, req, &out);
    if (!s.ok()) {
      std::fprintf(stderr, "daemon_load: SubmitJob: %s\n", s.error_message().c_str());
      stop_daemon();
      return 1;
    }
    job = out.id();
  }
  // The load starts once the reference trial is in, so every call type has a trial to show.
  for (int i = 0; i < 1200; ++i) {
    grpc::ClientContext c;
    pb::ListTrialsRequest req;
    req.set_job_id(job);
    req.set_status(pb::TRIAL_COMPLETE);
    pb::ListTrialsResponse resp;
    if (stub->ListTrials(&c, req, &resp).ok() && resp.trials_size() > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  Stats stats;
  std::vector<double> rss;
  rss.push_back(rss_mib(pid));
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::seconds(seconds);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) threads.emplace_back(client_loop, addr, job, end, 1000u + static_cast<unsigned>(i), &stats);
  while (Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    rss.push_back(rss_mib(pid));
  }
  for (auto& t : threads) t.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  rss.push_back(rss_mib(pid));

  int trials_done = 0;
  {
    grpc::ClientContext c;
    pb::GetJobRequest req;
    req.set_job_id(job);
    pb::Job out;
    if (stub->GetJob(&c, req, &out).ok()) trials_done = out.trials_done();
    grpc::ClientContext cc;
    pb::CancelJobRequest creq;
    creq.set_job_id(job);
    stub->CancelJob(&cc, creq, &out);
  }
  stop_daemon();

  int errors = 0;
  std::printf("clients=%d seconds=%.1f job_trials_done=%d\n", clients, wall_s, trials_done);
  for (const std::string& call : kCalls) {
    std::vector<double>& v = stats.latency_ms[call];
    errors += stats.errors[call];
    const size_t n = v.size();
    const double p50 = quantile(v, 0.5), p99 = quantile(v, 0.99), max = v.empty() ? 0 : v.back();
    std::printf("%-10s calls=%zu per_s=%.0f errors=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f\n", call.c_str(), n,
                static_cast<double>(n) / wall_s, stats.errors[call], p50, p99, max);
  }
  const double peak = *std::max_element(rss.begin(), rss.end());
  // rss[0] is before the load, rss[i] i seconds into it; the last sample is after the clients stopped.
  std::printf("soartuned_rss_mib before=%.1f end=%.1f peak=%.1f samples=%zu every_10s=", rss.front(), rss.back(), peak,
              rss.size());
  for (size_t i = 10; i < rss.size(); i += 10) std::printf("%s%.1f", i == 10 ? "" : ",", rss[i]);
  std::printf("\n");
  std::printf("errors=%d\n", errors);
  for (const std::string& e : stats.first_errors) std::printf("  first error: %s\n", e.c_str());
  std::error_code ec;
  fs::remove_all(dir, ec);
  return errors == 0 ? 0 : 1;
}
