#include "daemon/job_manager.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "search/multi_fidelity.h"

#include "core/worker_progress.h"
#include "daemon/early_stop.h"
#include "daemon/fidelity.h"
#include "daemon/trial_result.h"
#include "daemon/worker_process.h"

namespace soartune::daemon {

namespace fs = std::filesystem;
using nlohmann::json;
using soartune::Result;
using soartune::Status;

namespace {

constexpr const char* kRestartReason = "daemon restarted";
constexpr const char* kShutdownReason = "daemon shut down";
constexpr const char* kCancelReason = "cancelled by CancelJob";

std::string make_job_id() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex m;
  std::lock_guard<std::mutex> l(m);
  char hex[8];
  std::snprintf(hex, sizeof hex, "%04x", static_cast<unsigned>(rng() & 0xffff));
  return std::string("job-") + buf + "-" + hex;
}

}  // namespace

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_terminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

std::string suggestion_to_json(const search::Suggestion& s) {
  json j;
  j["strategy"] = s.strategy;
  j["predicted_score"] = std::isfinite(s.predicted_score) ? s.predicted_score : 0.0;
  j["predicted_score_std"] = std::isfinite(s.predicted_score_std) ? s.predicted_score_std : 0.0;
  j["expected_improvement"] = std::isfinite(s.expected_improvement) ? s.expected_improvement : 0.0;
  j["p_failure"] = std::isfinite(s.p_failure) ? s.p_failure : 0.0;
  j["p_gate"] = s.p_gate;
  j["note"] = s.note;
  j["config"] = soartune::to_text(s.config);
  return j.dump();
}

// ---- Watcher ----

void Watcher::push(JobEventData e) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return;
    q_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::optional<JobEventData> Watcher::pop(int timeout_ms) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return closed_ || !q_.empty(); });
  if (q_.empty()) return std::nullopt;
  JobEventData e = std::move(q_.front());
  q_.pop_front();
  return e;
}

void Watcher::close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool Watcher::closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

// ---- JobManager ----


namespace {

std::vector<TrialRecord> all_trials(Store& s, const std::string& job_id) {
  TrialQuery q;
  q.job_id = job_id;
  q.limit = 0;
  return s.list_trials(q);
}

}  // namespace

struct JobManager::RunningTrial {
  TrialRecord rec;
  int device = -1;
  bool is_reference = false;
  std::string trial_file;
  double timeout_s = 0;
  std::string cancel_reason;
  TrialControl control;
  int64_t attach_to = 0;       // a Slurm job an earlier daemon started for this trial: wait for it, do not start one
  std::thread th;
  std::atomic<bool> done{false};
  // Early stop, guarded by the job's run.m: the worker's latest progress, and the rule's verdict once it stopped it.
  std::optional<WorkerProgress> progress;
  std::optional<EarlyStopFacts> early_stop;
};

struct JobManager::JobRun {
  std::string id;
  std::shared_ptr<const JobSpec> spec;
  std::string work_dir;
  std::thread th;
  std::mutex m;
  std::condition_variable cv;
  std::atomic<bool> cancel{false}, stop{false}, finished{false};
  // Guarded by m: the job as stored, its trials as scored, what the runner waits on.
  JobRecord job;
  ScoredTrials trials;
  uint64_t events = 0;                                          // bumped by everything that wakes the runner
  std::map<int64_t, std::shared_ptr<RunningTrial>> running;
  std::condition_variable finished_cv;
  // The runner's own.
  std::unique_ptr<search::Strategy> strategy;
  std::vector<search::Observation> prior;
};

JobManager::JobManager(DaemonConfig cfg, std::unique_ptr<Store> store)
    : cfg_(std::move(cfg)),
      store_(std::move(store)),
      device_busy_(cfg_.devices.size(), false),
      executor_(make_executor(cfg_)) {}

JobManager::~JobManager() { shutdown(); }

Status JobManager::start() {
  const bool reattach = executor_->trials_outlive_daemon();
  Result<int> failed = with_store([&](Store& s) { return s.fail_running_trials(kRestartReason, reattach); });
  if (!failed.ok()) return failed.status();
  if (failed.value() > 0) spdlog::warn("marked {} trial(s) left RUNNING by a crash as FAILED ({})", failed.value(), kRestartReason);
  std::vector<JobRecord> resume = with_store([](Store& s) {
    std::vector<JobRecord> v = s.jobs_in_state(JobState::kRunning);
    std::vector<JobRecord> q = s.jobs_in_state(JobState::kQueued);
    v.insert(v.end(), q.begin(), q.end());
    return v;
  });
  for (JobRecord& job : resume) {
    Result<JobSpec> spec = parse_job_spec(job.spec_yaml, SpecContext{cfg_.workloads_dir, cfg_.data_roots});
    if (!spec.ok()) {
      job.state = JobState::kFailed;
      job.error = "cannot resume: " + spec.status().message;
      job.finished_ms = now_ms();
      with_store([&](Store& s) { return s.update_job(job); });
      spdlog::error("job {}: {}", job.id, job.error);
      continue;
    }
    spdlog::info("resuming job {} ({})", job.id, to_string(job.state));
    auto shared = std::make_shared<const JobSpec>(std::move(spec).value());
    {
      std::lock_guard<std::mutex> l(mu_);
      specs_[job.id] = shared;
    }
    if (Status s = start_runner(job, shared); !s.ok()) spdlog::error("job {}: cannot resume: {}", job.id, s.message);
  }
  return Status::Ok();
}

void JobManager::shutdown() {
  if (shutting_down_.exchange(true)) return;
  std::vector<std::shared_ptr<JobRun>> runs;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, r] : runs_) runs.push_back(r);
  }
  for (auto& r : runs) {
    r->stop = true;
    wake(*r);
  }
  for (auto& r : runs)
    if (r->th.joinable()) r->th.join();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [id, ws] : watchers_)
    for (auto& w : ws)
      if (auto p = w.lock()) p->close();
}

void JobManager::wake(JobRun& run) {
  {
    std::lock_guard<std::mutex> l(run.m);
    ++run.events;
  }
  run.cv.notify_all();
}

int JobManager::job_parallelism(const JobSpec& spec) const {
  int p = cfg_.parallel_trials;
  if (spec.parallel_trials) p = std::min(p, *spec.parallel_trials);
  return std::max(1, std::min<int>(p, static_cast<int>(cfg_.devices.size())));
}

std::optional<int> JobManager::acquire_device() {
  std::lock_guard<std::mutex> l(mu_);
  for (size_t i = 0; i < device_busy_.size(); ++i) {
    if (!device_busy_[i]) {
      device_busy_[i] = true;
      return static_cast<int>(i);
    }
  }
  return std::nullopt;
}

void JobManager::release_device(int d) {
  std::vector<std::shared_ptr<JobRun>> runs;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (d >= 0 && d < static_cast<int>(device_busy_.size())) device_busy_[d] = false;
    for (auto& [id, r] : runs_)
      if (!r->finished) runs.push_back(r);
  }
  for (auto& r : runs) wake(*r);   // a runner of another job may be waiting for this device
}

int JobManager::free_devices() {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(std::count(device_busy_.begin(), device_busy_.end(), false));
}

Result<JobView> JobManager::submit(const std::string& spec_yaml) {
  if (shutting_down_) return Status::Precondition("the daemon is shutting down");
  Result<JobSpec> parsed = parse_job_spec(spec_yaml, SpecContext{cfg_.workloads_dir, cfg_.data_roots});
  if (!parsed.ok()) return parsed.status();
  auto spec = std::make_shared<const JobSpec>(std::move(parsed).value());
  JobRecord job;
  job.id = make_job_id();
  job.name = spec->name;
  job.spec_yaml = spec_yaml;
  job.model = spec->model;
  std::string dev = cfg_.devices.front();
  job.device_key = device_key(*spec, dev.substr(0, dev.find(':')));
  job.strategy = spec->strategy;
  job.trial_budget = spec->trial_budget;
  job.state = JobState::kQueued;
  job.work_dir = (fs::path(cfg_.work_dir) / job.id).string();
  job.created_ms = now_ms();
  if (Status s = with_store([&](Store& st) { return st.insert_job(job); }); !s.ok()) return s;
  spdlog::info("job {} submitted: model {}, strategy {}, {} trials", job.id, job.model, job.strategy,
               job.trial_budget);
  for (const std::string& w : spec->warnings) spdlog::warn("job {}: {}", job.id, w);
  {
    std::lock_guard<std::mutex> l(mu_);
    specs_[job.id] = spec;
  }
  if (Status s = start_runner(job, spec); !s.ok()) return s;
  return get_job(job.id);
}

Status JobManager::start_runner(const JobRecord& job, std::shared_ptr<const JobSpec> spec) {
  auto run = std::make_shared<JobRun>();
  run->id = job.id;
  run->spec = std::move(spec);
  run->work_dir = job.work_dir.empty() ? (fs::path(cfg_.work_dir) / job.id).string() : job.work_dir;
  run->job = job;
  // The one read of the job's trials: from here on the runner keeps them.
  run->trials = ScoredTrials(run->spec->scoring);
  run->trials.reset(with_store([&](Store& s) { return all_trials(s, job.id); }));
  {
    std::lock_guard<std::mutex> l(mu_);
    runs_[job.id] = run;
  }
  snapshots_.erase(job.id);   // the runner's trials are served from now on
  // Trials an earlier daemon left running in Slurm: wait for them again, each in a slot of its own.
  std::vector<TrialRecord> left_running;
  for (const auto& [n, t] : run->trials.all())
    if (t.status == TrialStatus::kRunning && t.slurm_job_id != 0) left_running.push_back(t);
  for (const TrialRecord& t : left_running) {
    auto rt = std::make_shared<RunningTrial>();
    rt->rec = t;
    rt->device = acquire_device().value_or(-1);
    rt->is_reference = t.is_reference;
    rt->timeout_s = run->spec->trial_timeout_s.value_or(cfg_.trial_timeout_s);
    char name[64];
    std::snprintf(name, sizeof name, "trial-%04lld.yaml", static_cast<long long>(t.number));
    rt->trial_file = (fs::path(run->work_dir) / name).string();
    rt->attach_to = t.slurm_job_id;
    {
      std::lock_guard<std::mutex> l(run->m);
      run->running[t.number] = rt;
    }
    JobRun* r = run.get();
    rt->th = std::thread([this, r, rt] { run_trial(*r, rt); });
  }
  run->th = std::thread([this, run] { run_job(run); });
  return Status::Ok();
}

std::shared_ptr<JobManager::JobRun> JobManager::run_of(const std::string& job_id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = runs_.find(job_id);
  return it == runs_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<const ScoredTrials>> JobManager::load_scored(const std::string& job_id) {
  // The revision is taken before the read: a write that ends during the read changes it, so what this read
  // missed is never kept under the revision that follows the write.
  const uint64_t revision = with_store([&](Store& s) { return s.trials_revision(job_id); });
  if (std::shared_ptr<const ScoredTrials> kept = snapshots_.find(job_id, revision)) return kept;
  Result<std::shared_ptr<const JobSpec>> spec = spec_of(job_id);
  auto scored = std::make_shared<ScoredTrials>(spec.ok() ? spec.value()->scoring : search::ScoringSpec{});
  scored->reset(with_store([&](Store& s) { return all_trials(s, job_id); }));
  snapshots_.put(job_id, revision, scored);
  return std::shared_ptr<const ScoredTrials>(std::move(scored));
}

namespace {

JobView make_view(const JobRecord& job, const ScoredTrials& ts, const search::ScoringSpec& scoring, int parallel) {
  JobView v;
  v.job = job;
  v.trials_done = ts.done();
  v.trials_failed = ts.failed();
  v.trials_pruned = ts.pruned();
  v.trials_running = ts.running();
  if (const TrialRecord* b = ts.best()) {
    v.best_score = b->score;
    v.best_trial = b->number;
  }
  v.gate_levels = scoring.gate_levels();
  for (const search::GateTier& g : scoring.gate) v.gate_above_pct.push_back(g.above_pct);
  if (is_terminal(job.state)) {
    v.eta_seconds = 0;
  } else if (ts.mean_trial_seconds() > 0) {
    const int remaining = std::max(0, job.trial_budget - ts.counted()) + ts.running();
    v.eta_seconds = ts.mean_trial_seconds() * std::ceil(static_cast<double>(remaining) / std::max(1, parallel));
  }
  return v;
}

}  // namespace

JobView JobManager::view_locked(const JobRun& run) {
  JobView v = make_view(run.job, run.trials, run.spec->scoring, job_parallelism(*run.spec));
  v.warnings = run.spec->warnings;
  return v;
}

Result<JobView> JobManager::view_of(const JobRecord& job) {
  if (std::shared_ptr<JobRun> run = run_of(job.id)) {
    std::lock_guard<std::mutex> l(run->m);
    return view_locked(*run);
  }
  Result<std::shared_ptr<const ScoredTrials>> ts = load_scored(job.id);
  if (!ts.ok()) return ts.status();
  Result<std::shared_ptr<const JobSpec>> spec = spec_of(job.id);
  JobView v = make_view(job, *ts.value(), spec.ok() ? spec.value()->scoring : search::ScoringSpec{},
                        spec.ok() ? job_parallelism(*spec.value()) : 1);
  if (spec.ok()) v.warnings = spec.value()->warnings;
  return v;
}

Result<JobView> JobManager::get_job(const std::string& id) {
  if (std::shared_ptr<JobRun> run = run_of(id)) {
    std::lock_guard<std::mutex> l(run->m);
    return view_locked(*run);
  }
  Result<JobRecord> job = with_store([&](Store& s) { return s.get_job(id); });
  if (!job.ok()) return job.status();
  return view_of(job.value());
}

std::vector<JobView> JobManager::list_jobs(int limit, int offset) {
  std::vector<JobRecord> jobs = with_store([&](Store& s) { return s.list_jobs(limit, offset); });
  std::vector<JobView> out;
  for (const JobRecord& j : jobs) {
    Result<JobView> v = view_of(j);
    if (v.ok()) out.push_back(v.value());
  }
  return out;
}

Result<JobView> JobManager::cancel(const std::string& id) {
  Result<JobView> current = get_job(id);
  if (!current.ok()) return current.status();
  if (is_terminal(current.value().job.state))
    return Status::Precondition("job_id: job " + id + " is already " + to_string(current.value().job.state) +
                                "; only QUEUED or RUNNING jobs can be cancelled");
  std::shared_ptr<JobRun> run = run_of(id);
  if (run && !run->finished) {
    run->cancel = true;
    wake(*run);
    // The runner kills the workers (SIGTERM, then SIGKILL after the grace period) and marks the job.
    std::unique_lock<std::mutex> l(run->m);
    run->finished_cv.wait_for(l, std::chrono::seconds(30), [&] { return run->finished.load(); });
  } else {
    JobRecord j = current.value().job;
    j.state = JobState::kCancelled;
    j.stop_reason = "cancelled";
    j.finished_ms = now_ms();
    if (Status s = with_store([&](Store& st) { return st.update_job(j); }); !s.ok()) return s;
  }
  return get_job(id);
}

Result<std::shared_ptr<const JobSpec>> JobManager::spec_of(const std::string& job_id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = specs_.find(job_id); it != specs_.end()) return it->second;
  }
  Result<JobRecord> job = with_store([&](Store& s) { return s.get_job(job_id); });
  if (!job.ok()) return job.status();
  Result<JobSpec> spec = parse_job_spec(job.value().spec_yaml, SpecContext{cfg_.workloads_dir, cfg_.data_roots});
  if (!spec.ok()) return Status::Precondition("job " + job_id + ": its spec no longer parses: " + spec.status().message);
  auto shared = std::make_shared<const JobSpec>(std::move(spec).value());
  std::lock_guard<std::mutex> l(mu_);
  specs_[job_id] = shared;
  return shared;
}

Result<std::vector<TrialRecord>> JobManager::trials(const std::string& job_id) {
  if (std::shared_ptr<JobRun> run = run_of(job_id)) {
    std::lock_guard<std::mutex> l(run->m);
    return run->trials.list();
  }
  Result<JobRecord> job = with_store([&](Store& s) { return s.get_job(job_id); });
  if (!job.ok()) return job.status();
  Result<std::shared_ptr<const ScoredTrials>> ts = load_scored(job_id);
  if (!ts.ok()) return ts.status();
  return ts.value()->list();
}

Status JobManager::read_trials(const std::string& job_id, const std::function<void(const ScoredTrials&)>& read) {
  if (std::shared_ptr<JobRun> run = run_of(job_id)) {
    std::lock_guard<std::mutex> l(run->m);
    read(run->trials);
    return Status::Ok();
  }
  Result<JobRecord> job = with_store([&](Store& s) { return s.get_job(job_id); });
  if (!job.ok()) return job.status();
  Result<std::shared_ptr<const ScoredTrials>> ts = load_scored(job_id);
  if (!ts.ok()) return ts.status();
  read(*ts.value());
  return Status::Ok();
}

Result<TrialRecord> JobManager::trial(const std::string& job_id, int64_t number) {
  if (std::shared_ptr<JobRun> run = run_of(job_id)) {
    std::lock_guard<std::mutex> l(run->m);
    if (const TrialRecord* t = run->trials.find(number)) return *t;
    return Status::NotFound("number: job " + job_id + " has no trial " + std::to_string(number));
  }
  std::optional<TrialRecord> found;
  Status s = read_trials(job_id, [&](const ScoredTrials& ts) {
    if (const TrialRecord* t = ts.find(number)) found = *t;
  });
  if (!s.ok()) return s;
  if (found) return *found;
  return Status::NotFound("number: job " + job_id + " has no trial " + std::to_string(number));
}

Result<TrialRecord> JobManager::best(const std::string& job_id) {
  std::optional<TrialRecord> best;
  if (std::shared_ptr<JobRun> run = run_of(job_id)) {
    std::lock_guard<std::mutex> l(run->m);
    if (const TrialRecord* b = run->trials.best()) best = *b;
  } else {
    Result<JobRecord> job = with_store([&](Store& s) { return s.get_job(job_id); });
    if (!job.ok()) return job.status();
    Result<std::shared_ptr<const ScoredTrials>> ts = load_scored(job_id);
    if (!ts.ok()) return ts.status();
    if (const TrialRecord* b = ts.value()->best()) best = *b;
  }
  if (!best) return Status::NotFound("job_id: job " + job_id + " has no COMPLETE trial yet");
  return *best;
}

std::vector<search::Observation> JobManager::warm_start_prior(const JobRecord& job, const JobSpec& spec) {
  std::vector<search::Observation> prior;
  if (!spec.warm_start) return prior;
  std::vector<TrialRecord> ts =
      with_store([&](Store& s) { return s.trials_for_device_key(job.device_key, job.id); });
  for (const TrialRecord& t : ts) {
    if (t.status != TrialStatus::kComplete) continue;
    soartune::Config view = space_view(spec, soartune::config_from_text(t.params));
    if (!spec.space.validate(view).ok()) continue;
    search::Observation o;
    o.config = std::move(view);
    o.outcome = search::Outcome::kComplete;
    o.metrics = metrics_of(t);
    prior.push_back(std::move(o));
  }
  return prior;
}

namespace {

// The search's view of a job: its problem, and its history (the COMPLETE reference first, then by number).
JobManager::SearchState search_state_of(const JobSpec& sp, const ScoredTrials& scored,
                                        std::vector<search::Observation> prior) {
  JobManager::SearchState st;
  st.problem.space = sp.space;
  st.problem.scoring = sp.scoring;
  st.problem.reference = sp.reference;
  st.problem.seed = sp.seed;
  st.problem.prior = std::move(prior);
  st.problem.fidelity_levels = sp.fidelity_levels;
  st.problem.eta = sp.fidelity_eta;
  std::vector<const TrialRecord*> ts;
  for (const auto& [n, t] : scored.all()) ts.push_back(&t);
  std::stable_sort(ts.begin(), ts.end(), [](const TrialRecord* a, const TrialRecord* b) {
    const bool ra = a->is_reference && a->status == TrialStatus::kComplete && search::is_full_fidelity(a->fidelity);
    const bool rb = b->is_reference && b->status == TrialStatus::kComplete && search::is_full_fidelity(b->fidelity);
    return ra != rb ? ra : a->number < b->number;
  });
  for (const TrialRecord* t : ts) {
    if (!counts_for_budget(*t)) continue;
    search::Observation o;
    o.config = space_view(sp, soartune::config_from_text(t->params));
    o.fidelity = t->fidelity;
    if (t->status == TrialStatus::kRunning) {
      o.outcome = search::Outcome::kPending;
    } else if (t->status == TrialStatus::kPruned) {
      o.outcome = search::Outcome::kPruned;
    } else if (t->status == TrialStatus::kComplete) {
      o.outcome = search::Outcome::kComplete;
      o.metrics = metrics_of(*t);
    } else {
      o.outcome = search::Outcome::kFailed;
      o.failure = t->failure_kind;
    }
    st.history.push_back(std::move(o));
    st.trials.push_back(*t);
  }
  return st;
}

}  // namespace

JobManager::SearchState JobManager::state_locked(const JobRun& run) {
  return search_state_of(*run.spec, run.trials, run.prior);
}

Result<JobManager::SearchState> JobManager::search_state(const std::string& job_id) {
  Result<std::shared_ptr<const JobSpec>> spec = spec_of(job_id);
  if (!spec.ok()) return spec.status();
  Result<JobRecord> job = with_store([&](Store& s) { return s.get_job(job_id); });
  if (!job.ok()) return job.status();
  std::vector<search::Observation> prior = warm_start_prior(job.value(), *spec.value());
  if (std::shared_ptr<JobRun> run = run_of(job_id)) {
    std::lock_guard<std::mutex> l(run->m);
    return search_state_of(*spec.value(), run->trials, std::move(prior));
  }
  Result<std::shared_ptr<const ScoredTrials>> ts = load_scored(job_id);
  if (!ts.ok()) return ts.status();
  return search_state_of(*spec.value(), *ts.value(), std::move(prior));
}

Result<std::shared_ptr<Watcher>> JobManager::watch(const std::string& job_id) {
  if (!run_of(job_id)) {
    Result<JobRecord> job = with_store([&](Store& s) { return s.get_job(job_id); });
    if (!job.ok()) return job.status();
  }
  auto w = std::make_shared<Watcher>();
  std::lock_guard<std::mutex> l(mu_);
  auto& ws = watchers_[job_id];
  ws.erase(std::remove_if(ws.begin(), ws.end(), [](const std::weak_ptr<Watcher>& p) { return p.expired(); }),
           ws.end());
  ws.push_back(w);
  return w;
}

void JobManager::publish(const std::string& job_id, JobEventData e) {
  std::vector<std::shared_ptr<Watcher>> targets;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = watchers_.find(job_id);
    if (it == watchers_.end()) return;
    for (auto& w : it->second)
      if (auto p = w.lock()) targets.push_back(p);
  }
  for (auto& w : targets) w->push(e);
}

void JobManager::finish_job(JobRun& run, JobState state, const std::string& stop_reason, const std::string& error) {
  JobRecord j;
  JobEventData e;
  {
    std::lock_guard<std::mutex> l(run.m);
    run.job.state = state;
    run.job.stop_reason = stop_reason;
    run.job.error = error;
    run.job.finished_ms = now_ms();
    j = run.job;
    e.job = view_locked(run);
  }
  if (Status s = with_store([&](Store& st) { return st.update_job(j); }); !s.ok())
    spdlog::error("job {}: cannot record the end: {}", run.id, s.message);
  spdlog::info("job {} {} ({}){}", run.id, to_string(state), stop_reason, error.empty() ? "" : ": " + error);
  e.kind = EventKind::kJobFinished;
  e.unix_ms = now_ms();
  publish(run.id, std::move(e));
}

void JobManager::launch_trial(JobRun& run, int device, const search::Suggestion& s, bool is_reference) {
  const JobSpec& spec = *run.spec;
  auto rt = std::make_shared<RunningTrial>();
  rt->device = device;
  rt->is_reference = is_reference;
  rt->timeout_s = spec.trial_timeout_s.value_or(cfg_.trial_timeout_s);
  soartune::Config config = is_reference ? spec.reference : trial_config(spec, s.config);
  int64_t number;
  {
    // Only this runner adds trials to its job: the next number is known without asking the store.
    std::lock_guard<std::mutex> l(run.m);
    number = run.trials.all().empty() ? 0 : run.trials.all().rbegin()->first + 1;
  }
  TrialRecord& rec = rt->rec;
  rec.job_id = run.id;
  rec.number = number;
  rec.status = TrialStatus::kRunning;
  rec.params = soartune::to_text(config);
  rec.started_ms = now_ms();
  rec.device = cfg_.devices[device];
  rec.suggestion_json = suggestion_to_json(s);
  rec.is_reference = is_reference;
  rec.fidelity = spec.fidelity_levels.empty() ? 1.0 : s.fidelity;

  std::error_code ec;
  fs::create_directories(run.work_dir, ec);
  char name[64];
  std::snprintf(name, sizeof name, "trial-%04lld.yaml", static_cast<long long>(number));
  rt->trial_file = (fs::path(run.work_dir) / name).string();
  std::string ref_file = (fs::path(run.work_dir) / reference_file_name(spec, rec.fidelity)).string();
  ReferenceFile ref;
  (is_reference ? ref.write : ref.read) = ref_file;
  ref.quant_cache = (fs::path(run.work_dir) / "quantized").string();
  {
    std::ofstream out(rt->trial_file);
    out << trial_yaml_at(spec, config, ref, rec.fidelity, {"job " + run.id + ", trial " + std::to_string(number)});
    if (!out) spdlog::error("job {}: cannot write {}", run.id, rt->trial_file);
  }
  if (Status st = with_store([&](Store& s2) { return s2.insert_trial(rec); }); !st.ok()) {
    spdlog::error("job {}: cannot record trial {}: {}", run.id, number, st.message);
    release_device(device);
    return;
  }
  spdlog::info("job {} trial {} started on {} ({})", run.id, number, rec.device, s.strategy);
  JobEventData e;
  {
    std::lock_guard<std::mutex> l(run.m);
    run.trials.put(rec);
    run.running[number] = rt;
    e.job = view_locked(run);
  }
  e.kind = EventKind::kTrialStarted;
  e.trial = rec;
  e.unix_ms = now_ms();
  publish(run.id, std::move(e));
  rt->th = std::thread([this, &run, rt] { run_trial(run, rt); });
}

void JobManager::run_trial(JobRun& run, std::shared_ptr<RunningTrial> rt) {
  TrialLaunch launch;
  launch.job_id = run.id;
  launch.number = rt->rec.number;
  launch.trial_file = rt->trial_file;
  launch.work_dir = run.work_dir;
  launch.device = rt->device >= 0 ? cfg_.devices[rt->device] : cfg_.devices.front();
  launch.timeout_s = rt->timeout_s;
  auto submitted = [&](int64_t slurm_job_id) {
    // Stored before anything else can go wrong, so a daemon that dies from here on re-attaches to it.
    if (Status st = with_store([&](Store& s) { return s.set_trial_slurm_job(run.id, launch.number, slurm_job_id); });
        !st.ok())
      spdlog::error("job {}: cannot record the Slurm job of trial {}: {}", run.id, launch.number, st.message);
    std::lock_guard<std::mutex> l(run.m);
    rt->rec.slurm_job_id = slurm_job_id;
    if (const TrialRecord* t = run.trials.find(launch.number)) {
      TrialRecord copy = *t;
      copy.slurm_job_id = slurm_job_id;
      run.trials.put(std::move(copy));
    }
  };
  // Early stop: each progress line the worker prints is weighed against the job's incumbent as it arrives; a
  // hopeless trial is killed as a cancel would kill it, and recorded PRUNED below. Not the baseline runs, and not
  // screening runs (a shortened workload does not compare with full runs).
  if (run.spec->early_stop && !rt->is_reference && search::is_full_fidelity(rt->rec.fidelity)) {
    rt->control.on_stdout_line = [&run, rt_ptr = rt.get(), warned = false](std::string_view line) mutable {
      Result<std::optional<WorkerProgress>> p = parse_worker_progress(line);
      if (!p.ok()) {
        if (!warned) spdlog::warn("job {} trial {}: {}", run.id, rt_ptr->rec.number, p.status().message);
        warned = true;
        return;
      }
      if (!p.value()) return;
      std::lock_guard<std::mutex> l(run.m);
      if (rt_ptr->early_stop) return;
      rt_ptr->progress = *p.value();
      if (!rt_ptr->cancel_reason.empty()) return;   // already being cancelled with the job
      std::optional<EarlyStopFacts> v = early_stop_verdict(*run.spec->early_stop, run.spec->scoring, *p.value(), run.trials);
      if (!v) return;
      rt_ptr->early_stop = v;
      rt_ptr->control.cancel.cancel();
      spdlog::info("job {} trial {} stopped early after {}: best reachable score {:.2f} < incumbent {:.2f} - {:.0f}%",
                   run.id, rt_ptr->rec.number, v->stage, v->bound, v->incumbent, 100 * v->margin);
    };
  }
  ExecutorOutcome ran = rt->attach_to ? executor_->attach(launch, rt->attach_to, rt->control)
                                      : executor_->run(launch, rt->control, submitted);
  if (ran.detached) {
    // The trial runs on in Slurm and stays RUNNING in the store: the next daemon re-attaches to it.
    spdlog::info("job {} trial {} left running in Slurm (job {})", run.id, launch.number, rt->rec.slurm_job_id);
    rt->done = true;
    release_device(rt->device);
    return;
  }
  const ProcessResult& res = ran.process;

  TrialRecord rec = rt->rec;
  TrialOutcome o = interpret_worker_run(res, rt->timeout_s, rec);
  if (ran.ended_by) {
    // The scheduler ended the run before the worker could: its verdict is the trial's.
    o.status = TrialStatus::kFailed;
    o.error = ran.reason;
    rec.failure_kind = *ran.ended_by;
    rec.failure_code = 0;
  }
  std::optional<EarlyStopFacts> stopped;
  std::optional<WorkerProgress> measured;
  std::string cancel_reason;
  {
    std::lock_guard<std::mutex> l(run.m);
    stopped = rt->early_stop;
    measured = rt->progress;
    cancel_reason = rt->cancel_reason;
  }
  if (stopped && res.cancelled && res.exited && res.exit_code == 0 && cancel_reason.empty() && !ran.ended_by) {
    // The worker finished before the kill reached it: a whole result is worth more than a stopped one.
    ProcessResult finished = res;
    finished.cancelled = false;
    TrialRecord whole = rt->rec;
    TrialOutcome w = interpret_worker_run(finished, rt->timeout_s, whole);
    if (w.status == TrialStatus::kComplete) {
      rec = std::move(whole);
      o = w;
      stopped.reset();
    }
  }
  if (stopped && measured && res.cancelled && cancel_reason.empty() && !ran.ended_by) {
    // Killed by the early-stop rule: PRUNED, with what it had measured and the rule's numbers.
    o.status = TrialStatus::kPruned;
    rec.failure_kind = FailureKind::kNone;
    rec.failure_code = 0;
    rec.early_stop = stopped;
    rec.tiers = measured_tiers(*measured);
    rec.relative_accuracy = measured->accuracy.relative_pct;
    rec.accuracy_metric = measured->accuracy.metric;
    rec.accuracy_proxy = measured->accuracy.proxy;
    rec.result_json = to_json(*measured);
    char why[200];
    std::snprintf(why, sizeof why, "stopped early after %s: best reachable score %.2f < incumbent %.2f - %.0f%%",
                  stopped->stage.c_str(), stopped->bound, stopped->incumbent, 100 * stopped->margin);
    o.error = why;
  }
  rec.status = o.status;
  rec.error = o.status == TrialStatus::kCancelled ? cancel_reason : o.error;
  rec.finished_ms = now_ms();
  {
    std::ofstream log(rt->trial_file.substr(0, rt->trial_file.size() - 5) + ".log");
    log << res.err_tail;
  }
  // Scored against the best seen so far, in memory; the store keeps the score it has now.
  JobEventData e;
  {
    std::lock_guard<std::mutex> l(run.m);
    rec = run.trials.put(std::move(rec));
    e.job = view_locked(run);
  }
  if (Status st = with_store([&](Store& s) { return s.finish_trial(rec); }); !st.ok())
    spdlog::error("job {}: cannot record the result of trial {}: {}", run.id, rec.number, st.message);
  if (o.status == TrialStatus::kComplete)
    spdlog::info("job {} trial {} COMPLETE in {:.1f} s: accuracy {:.2f}%, score {:.2f}", run.id, rec.number,
                 res.wall_s, rec.relative_accuracy, rec.score);
  else if (o.status == TrialStatus::kPruned)
    spdlog::info("job {} trial {} PRUNED in {:.1f} s: {}", run.id, rec.number, res.wall_s, rec.error);
  else
    spdlog::warn("job {} trial {} {}: {}", run.id, rec.number, to_string(o.status), rec.error);

  e.kind = o.status == TrialStatus::kComplete ? EventKind::kTrialFinished
           : o.status == TrialStatus::kPruned ? EventKind::kTrialPruned
                                               : EventKind::kTrialFailed;
  e.trial = rec;
  e.unix_ms = now_ms();
  publish(run.id, std::move(e));
  rt->done = true;
  release_device(rt->device);   // wakes this runner too
}

void JobManager::run_job(std::shared_ptr<JobRun> run_ptr) {
  JobRun& run = *run_ptr;
  const JobSpec& spec = *run.spec;
  auto reap = [&](bool all) {
    std::vector<std::shared_ptr<RunningTrial>> done;
    {
      std::lock_guard<std::mutex> l(run.m);
      for (auto it = run.running.begin(); it != run.running.end();) {
        if (all || it->second->done) {
          done.push_back(it->second);
          it = run.running.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& rt : done)
      if (rt->th.joinable()) rt->th.join();
  };
  auto kill_all = [&](const std::string& reason, bool detach) {
    std::lock_guard<std::mutex> l(run.m);
    for (auto& [n, rt] : run.running) {
      rt->cancel_reason = reason;
      if (detach) rt->control.detach = true;
      else rt->control.cancel.cancel();
    }
  };
  auto end = [&] {
    {
      std::lock_guard<std::mutex> l(run.m);
      run.finished = true;
    }
    run.finished_cv.notify_all();
  };

  JobRecord job0;
  {
    std::lock_guard<std::mutex> l(run.m);
    run.job.state = JobState::kRunning;
    if (run.job.started_ms == 0) run.job.started_ms = now_ms();
    if (run.job.work_dir.empty()) run.job.work_dir = run.work_dir;
    job0 = run.job;
  }
  with_store([&](Store& s) { return s.update_job(job0); });
  const int64_t started_ms = job0.started_ms;
  run.prior = warm_start_prior(job0, spec);
  Result<std::unique_ptr<search::Strategy>> strategy = search::make_strategy(spec.strategy);
  if (!strategy.ok()) {
    finish_job(run, JobState::kFailed, "error", strategy.status().message);
    end();
    return;
  }
  run.strategy = std::move(strategy).value();
  if (!spec.fidelity_levels.empty()) run.strategy = search::with_multi_fidelity(std::move(run.strategy));
  const int parallel = job_parallelism(spec);
  std::string stopping;
  int low_ei_rounds = 0;
  int finished_at_empty_ask = -1;

  for (;;) {
    reap(false);
    if (run.cancel || run.stop) {
      bool cancelled = run.cancel;
      // A daemon shutting down leaves trials that outlive it running, for the next one to re-attach to.
      kill_all(cancelled ? kCancelReason : kShutdownReason, !cancelled && executor_->trials_outlive_daemon());
      reap(true);
      if (cancelled) finish_job(run, JobState::kCancelled, "cancelled", "");
      break;
    }
    uint64_t seen;
    int counted, finished, running_now;
    bool ref_done, any_complete, levels_ready;
    std::optional<double> level_missing;
    std::optional<TrialRecord> ref_failed;
    {
      std::lock_guard<std::mutex> l(run.m);
      seen = run.events;
      counted = run.trials.counted();
      finished = run.trials.done() + run.trials.pruned();
      any_complete = run.trials.complete() > 0;
      ref_done = run.trials.reference_complete();
      // Multi-fidelity: each lower level's reference trial, after the full one and before any search trial.
      level_missing = reference_level_missing(spec, run.trials);
      levels_ready = std::all_of(spec.fidelity_levels.begin(), spec.fidelity_levels.end(), [&](double f) {
        return search::is_full_fidelity(f) || std::any_of(run.trials.all().begin(), run.trials.all().end(), [&](const auto& nt) {
                 const TrialRecord& t = nt.second;
                 return t.is_reference && t.status == TrialStatus::kComplete && std::fabs(t.fidelity - f) < 1e-9;
               });
      });
      if (const TrialRecord* f = run.trials.reference_failed()) ref_failed = *f;
      running_now = static_cast<int>(run.running.size());
    }
    if ((!ref_done || !levels_ready) && ref_failed && running_now == 0) {
      finish_job(run, JobState::kFailed, "reference failed",
                 "reference trial " + std::to_string(ref_failed->number) + " failed: " + ref_failed->error);
      break;
    }
    if (stopping.empty()) {
      if (counted >= spec.trial_budget) stopping = "budget";
      else if (spec.time_budget_s && (now_ms() - started_ms) / 1000.0 >= *spec.time_budget_s) stopping = "time budget";
    }
    if (!stopping.empty() && running_now == 0) {
      finish_job(run, any_complete ? JobState::kSucceeded : JobState::kFailed, stopping,
                 any_complete ? "" : "no trial completed");
      break;
    }
    if (stopping.empty()) {
      int slots = std::min(parallel - running_now, spec.trial_budget - counted);
      if (!ref_done) {
        if (running_now == 0 && !ref_failed && slots > 0) {
          if (std::optional<int> dev = acquire_device()) {
            search::Suggestion s;
            s.config = space_view(spec, spec.reference);
            s.strategy = "reference";
            s.note = "the job's reference config: the baseline for durations and accuracy";
            launch_trial(run, *dev, s, true);
            continue;
          }
        }
      } else if (!levels_ready) {
        if (level_missing && !ref_failed && slots > 0) {
          if (std::optional<int> dev = acquire_device()) {
            search::Suggestion s;
            s.config = space_view(spec, spec.reference);
            s.strategy = "reference";
            s.fidelity = *level_missing;
            s.note = "the job's reference config at this fidelity level: the baseline its screening runs compare with";
            launch_trial(run, *dev, s, true);
            continue;
          }
        }
      } else if (slots > 0 && free_devices() > 0 && finished != finished_at_empty_ask) {
        int q = std::min(slots, free_devices());
        SearchState st;
        {
          std::lock_guard<std::mutex> l(run.m);
          st = state_locked(run);
        }
        std::vector<search::Suggestion> suggestions = run.strategy->ask(st.problem, st.history, q);
        std::optional<double> ei = run.strategy->last_expected_improvement_pct();
        if (spec.stop_when && ei) {
          low_ei_rounds = *ei < spec.stop_when->ei_below_pct ? low_ei_rounds + 1 : 0;
          if (low_ei_rounds >= spec.stop_when->rounds) {
            stopping = "converged";
            spdlog::info("job {}: expected improvement {:.3f}% under {}% for {} rounds", run.id, *ei,
                         spec.stop_when->ei_below_pct, low_ei_rounds);
            continue;
          }
        }
        if (suggestions.empty()) {
          finished_at_empty_ask = finished;
          if (running_now == 0) stopping = "space exhausted";
          continue;
        }
        bool launched = false;
        for (const search::Suggestion& s : suggestions) {
          std::optional<int> dev = acquire_device();
          if (!dev) break;
          launch_trial(run, *dev, s, false);
          launched = true;
        }
        if (launched) continue;
      }
    }
    // Nothing to do until something happens: a trial ends, a device frees up, a cancel, a shutdown, or the
    // time budget runs out.
    std::unique_lock<std::mutex> l(run.m);
    auto woken = [&] { return run.events != seen || run.cancel || run.stop; };
    if (spec.time_budget_s && stopping.empty()) {
      const auto deadline = std::chrono::system_clock::time_point(std::chrono::milliseconds(started_ms)) +
                            std::chrono::milliseconds(static_cast<int64_t>(*spec.time_budget_s * 1000) + 1);
      run.cv.wait_until(l, deadline, woken);
    } else {
      run.cv.wait(l, woken);
    }
  }
  end();
}

}  // namespace soartune::daemon
