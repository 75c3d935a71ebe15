// Runs jobs: one runner thread per active job asks the strategy for as many configs as there are free device
// slots, runs each in its own soartune-worker process, stores every trial, and streams events to watchers.
//
// Event-driven: the runner sleeps until something it acts on happens (a trial finishes, a device frees up, the
// job is cancelled, the daemon stops, the time budget runs out), not on a timer. It holds the job's trials in
// memory (ScoredTrials, read from the store once when the runner starts) and updates them as trials start and
// finish, so neither its turns nor the events it publishes re-read or rescore the job; watchers get the job
// view computed from that state.
//
// Scores are relative to the best duration seen on each tier, so they change as trials finish: the store
// keeps each trial's raw metrics (and the score it had when it finished); what is served is scored against the
// job's current best (kept current in memory for jobs this daemon runs, computed on read for the others).
//
// Shutdown (SIGTERM): running workers are killed, their trials recorded CANCELLED ("daemon shut down"), and
// the jobs stay RUNNING in the store, so the next start resumes them. A crash (kill -9) leaves RUNNING trials
// behind; the next start marks them FAILED ("daemon restarted") and resumes the jobs as well. Where trials
// outlive the daemon (executor: slurm, executor.h) both cases differ: a stopping daemon leaves them running in
// Slurm, and the next start re-attaches to every RUNNING trial with a Slurm job id instead of failing it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/daemon_config.h"
#include "daemon/executor.h"
#include "daemon/job_spec.h"
#include "daemon/scored_snapshots.h"
#include "daemon/scored_trials.h"
#include "daemon/store.h"
#include "core/status.h"
#include "search/strategy.h"

namespace soartune::daemon {

// A job as served: the record plus counts, best score and ETA.
struct JobView {
  JobRecord job;
  int trials_done = 0, trials_failed = 0, trials_running = 0;
  int trials_pruned = 0;             // stopped early (early_stop); not in trials_done
  double best_score = 0;
  int64_t best_trial = -1;
  double eta_seconds = -1;
  std::vector<double> gate_levels;   // the C levels of the job's scoring, best first, ending with 0
  std::vector<double> gate_above_pct;   // the accuracy (percent) above which each level applies (one fewer)
  std::vector<std::string> warnings;  // the spec's (JobSpec::warnings)
};

enum class EventKind { kSnapshot, kTrialStarted, kTrialFinished, kTrialFailed, kJobFinished, kTrialPruned };

struct JobEventData {
  EventKind kind = EventKind::kSnapshot;
  JobView job;
  std::optional<TrialRecord> trial;
  int64_t unix_ms = 0;
};

// One WatchJob stream's queue.
class Watcher {
 public:
  void push(JobEventData e);
  // Waits up to `timeout_ms` for an event; nullopt on timeout or after close().
  std::optional<JobEventData> pop(int timeout_ms);
  void close();
  bool closed() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<JobEventData> q_;
  bool closed_ = false;
};

int64_t now_ms();
bool is_terminal(JobState s);

class JobManager {
 public:
  JobManager(DaemonConfig cfg, std::unique_ptr<Store> store);
  ~JobManager();

  // Crash recovery (RUNNING trials -> FAILED "daemon restarted"), then resumes RUNNING and QUEUED jobs.
  soartune::Status start();
  // Kills running workers (trials CANCELLED "daemon shut down"), joins every runner, closes every watcher.
  void shutdown();
  bool shutting_down() const { return shutting_down_.load(); }

  const DaemonConfig& config() const { return cfg_; }

  soartune::Result<JobView> submit(const std::string& spec_yaml);
  soartune::Result<JobView> get_job(const std::string& id);
  std::vector<JobView> list_jobs(int limit, int offset);
  soartune::Result<JobView> cancel(const std::string& id);

  // Every trial of the job (numbers ascending), re-scored against the job's current best.
  soartune::Result<std::vector<TrialRecord>> trials(const std::string& job_id);
  // Calls `read` with the job's trials as scored now, without copying them: under the runner's lock for a job
  // this daemon runs (keep `read` short: the runner waits), on a kept snapshot otherwise. kNotFound for an
  // unknown job.
  soartune::Status read_trials(const std::string& job_id, const std::function<void(const ScoredTrials&)>& read);
  soartune::Result<TrialRecord> trial(const std::string& job_id, int64_t number);
  // The best COMPLETE trial; kNotFound when there is none yet.
  soartune::Result<TrialRecord> best(const std::string& job_id);

  // The parsed spec of a job (cached); its scoring is what trials are scored with.
  soartune::Result<std::shared_ptr<const JobSpec>> spec_of(const std::string& job_id);
  // The search problem of a job as the strategy sees it, and its history (reference first).
  struct SearchState {
    search::SearchProblem problem;
    std::vector<search::Observation> history;
    std::vector<TrialRecord> trials;         // aligned with history
  };
  soartune::Result<SearchState> search_state(const std::string& job_id);

  // Subscribes to a job's events; kNotFound for an unknown job.
  soartune::Result<std::shared_ptr<Watcher>> watch(const std::string& job_id);

  // The store, for the submission RPCs; calls are serialised.
  template <typename F>
  auto with_store(F&& f) {
    std::lock_guard<std::mutex> l(store_mu_);
    return f(*store_);
  }

 private:
  struct RunningTrial;
  struct JobRun;

  std::shared_ptr<JobRun> run_of(const std::string& job_id);
  // The job's trials scored from the store (for a job no runner of this daemon holds), read and scored once
  // per store revision of the job (snapshots_).
  soartune::Result<std::shared_ptr<const ScoredTrials>> load_scored(const std::string& job_id);
  JobView view_locked(const JobRun& run);   // run.m held
  SearchState state_locked(const JobRun& run);   // run.m held
  void wake(JobRun& run);
  void run_job(std::shared_ptr<JobRun> run);
  void launch_trial(JobRun& run, int device, const search::Suggestion& s, bool is_reference);
  void run_trial(JobRun& run, std::shared_ptr<RunningTrial> rt);
  void finish_job(JobRun& run, JobState state, const std::string& stop_reason, const std::string& error);
  soartune::Status start_runner(const JobRecord& job, std::shared_ptr<const JobSpec> spec);
  void publish(const std::string& job_id, JobEventData e);
  soartune::Result<JobView> view_of(const JobRecord& job);
  std::vector<search::Observation> warm_start_prior(const JobRecord& job, const JobSpec& spec);
  int job_parallelism(const JobSpec& spec) const;
  std::optional<int> acquire_device();
  void release_device(int d);
  int free_devices();

  DaemonConfig cfg_;
  std::mutex store_mu_;
  std::unique_ptr<Store> store_;
  ScoredSnapshots snapshots_;

  std::mutex mu_;   // runs_, specs_, watchers_, device_busy_
  std::map<std::string, std::shared_ptr<JobRun>> runs_;
  std::map<std::string, std::shared_ptr<const JobSpec>> specs_;
  std::map<std::string, std::vector<std::weak_ptr<Watcher>>> watchers_;
  std::vector<bool> device_busy_;
  std::unique_ptr<Executor> executor_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace soartune::daemon

namespace soartune::daemon {

// search::Suggestion <-> the JSON the store keeps with each trial.
std::string suggestion_to_json(const search::Suggestion& s);

}  // namespace soartune::daemon
