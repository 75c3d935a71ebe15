#include "daemon/store.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "daemon/store_sqlite.h"

namespace soartune::daemon {

using sql::Connection;
using sql::Statement;
using sql::Transaction;

namespace {

constexpr size_t kMaxIdleConnections = 8;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string params_to_json(const std::map<std::string, std::string>& params) {
  return nlohmann::json(params).dump();
}

std::map<std::string, std::string> params_from_json(const std::string& text) {
  std::map<std::string, std::string> out;
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    out[it.key()] = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
  }
  return out;
}

// ---- jobs ----

constexpr const char* kJobColumns =
    "id, name, spec_yaml, model, device_key, strategy, trial_budget, state, error, stop_reason, work_dir, "
    "created_ms, started_ms, finished_ms";

JobRecord read_job(const Statement& q) {
  JobRecord j;
  j.id = q.text(0);
  j.name = q.text(1);
  j.spec_yaml = q.text(2);
  j.model = q.text(3);
  j.device_key = q.text(4);
  j.strategy = q.text(5);
  j.trial_budget = static_cast<int>(q.int64(6));
  j.state = job_state_from_string(q.text(7)).value_or(JobState::kFailed);
  j.error = q.text(8);
  j.stop_reason = q.text(9);
  j.work_dir = q.text(10);
  j.created_ms = q.int64(11);
  j.started_ms = q.int64(12);
  j.finished_ms = q.int64(13);
  return j;
}

// Binds every job column but id, from index `first`, in kJobColumns order.
void bind_job_fields(Statement& q, const JobRecord& j, int first) {
  q.bind(first, j.name)
      .bind(first + 1, j.spec_yaml)
      .bind(first + 2, j.model)
      .bind(first + 3, j.device_key)
      .bind(first + 4, j.strategy)
      .bind(first + 5, j.trial_budget)
      .bind(first + 6, to_string(j.state))
      .bind(first + 7, j.error)
      .bind(first + 8, j.stop_reason)
      .bind(first + 9, j.work_dir)
      .bind(first + 10, j.created_ms)
      .bind(first + 11, j.started_ms)
      .bind(first + 12, j.finished_ms);
}

// ---- trials ----

constexpr const char* kTrialColumns =
    "t.job_id, t.number, t.status, t.params_json, t.relative_accuracy, t.accuracy_metric, t.score, t.gate, "
    "t.error, t.started_ms, t.finished_ms, t.log_tail, t.engine_build, t.device, t.peak_memory_bytes, "
    "t.suggestion_json, t.result_json, t.is_reference, t.failure_kind, t.failure_code, "
    "t.slurm_job_id, t.accuracy_proxy, t.fidelity, t.early_stop_stage, t.early_stop_bound, t.early_stop_incumbent, "
    "t.early_stop_margin, t.load_s, t.weights_s, t.prepare_s, t.quantize_s, t.accuracy_s, t.tiers_s";

TrialRecord read_trial(const Statement& q) {
  TrialRecord t;
  t.job_id = q.text(0);
  t.number = q.int64(1);
  t.status = trial_status_from_string(q.text(2)).value_or(TrialStatus::kFailed);
  t.params = params_from_json(q.text(3));
  t.relative_accuracy = q.real(4);
  t.accuracy_metric = q.text(5);
  t.score = q.real(6);
  t.gate = q.real(7);
  t.error = q.text(8);
  t.started_ms = q.int64(9);
  t.finished_ms = q.int64(10);
  t.log_tail = q.text(11);
  t.engine_build = q.text(12);
  t.device = q.text(13);
  t.peak_memory_bytes = q.int64(14);
  t.suggestion_json = q.text(15);
  t.result_json = q.text(16);
  t.is_reference = q.int64(17) != 0;
  t.failure_kind = failure_kind_from_string(q.text(18)).value_or(FailureKind::kUnknown);
  t.failure_code = static_cast<int>(q.int64(19));
  t.slurm_job_id = q.int64(20);
  t.accuracy_proxy = q.int64(21) != 0;
  t.fidelity = q.real(22);
  if (!q.text(23).empty()) t.early_stop = EarlyStopFacts{q.text(23), q.real(24), q.real(25), q.real(26)};
  t.timings = TrialTimings{q.real(27), q.real(28), q.real(29), q.real(30), q.real(31), q.real(32)};
  return t;
}

Status load_tiers(Connection& c, TrialRecord& t) {
  auto q = Statement::prepare(c,
                              "SELECT tier, concurrency, duration_s, ttft_p50_ms, ttft_p90_ms, ttft_p99_ms, "
                              "tpot_p50_ms, tpot_p90_ms, tpot_p99_ms, output_tokens_per_s FROM trial_tiers "
                              "WHERE job_id = ? AND number = ? ORDER BY position");
  if (!q.ok()) return q.status();
  Statement& s = q.value();
  s.bind(1, t.job_id).bind(2, t.number);
  t.tiers.clear();
  while (true) {
    auto row = s.step();
    if (!row.ok()) return row.status();
    if (!row.value()) break;
    TierRecord r;
    r.tier = s.text(0);
    r.concurrency = static_cast<int>(s.int64(1));
    r.duration_s = s.real(2);
    r.ttft_p50_ms = s.real(3);
    r.ttft_p90_ms = s.real(4);
    r.ttft_p99_ms = s.real(5);
    r.tpot_p50_ms = s.real(6);
    r.tpot_p90_ms = s.real(7);
    r.tpot_p99_ms = s.real(8);
    r.output_tokens_per_s = s.real(9);
    t.tiers.push_back(std::move(r));
  }
  return Status::Ok();
}

Status load_plans_and_env(Connection& c, TrialRecord& t) {
  auto p = Statement::prepare(c, "SELECT op, shape, choice_json FROM trial_plans WHERE job_id = ? AND number = ? "
                                 "ORDER BY position");
  if (!p.ok()) return p.status();
  p.value().bind(1, t.job_id).bind(2, t.number);
  t.plans.clear();
  while (true) {
    auto row = p.value().step();
    if (!row.ok()) return row.status();
    if (!row.value()) break;
    t.plans.push_back({p.value().text(0), p.value().text(1), params_from_json(p.value().text(2))});
  }
  auto e = Statement::prepare(c, "SELECT name, value FROM trial_env WHERE job_id = ? AND number = ? ORDER BY name");
  if (!e.ok()) return e.status();
  e.value().bind(1, t.job_id).bind(2, t.number);
  t.env.clear();
  while (true) {
    auto row = e.value().step();
    if (!row.ok()) return row.status();
    if (!row.value()) break;
    t.env[e.value().text(0)] = e.value().text(1);
  }
  return Status::Ok();
}

// Runs a trial SELECT (columns kTrialColumns) and loads each trial's tiers.
Result<std::vector<TrialRecord>> collect_trials(Connection& c, Statement& q) {
  std::vector<TrialRecord> out;
  while (true) {
    auto row = q.step();
    if (!row.ok()) return row.status();
    if (!row.value()) break;
    out.push_back(read_trial(q));
  }
  for (TrialRecord& t : out) {
    Status s = load_tiers(c, t);
    if (s.ok()) s = load_plans_and_env(c, t);
    if (!s.ok()) return s;
  }
  return out;
}

std::string trial_name(const std::string& job_id, int64_t number) {
  return "trial " + std::to_string(number) + " of job " + job_id;
}

// ---- submissions ----

constexpr const char* kSubmissionColumns =
    "id, job_id, trial, submitted_ms, budget_day, status, s1, s8, sinf, relative_accuracy, c, final_score, note";

SubmissionRecord read_submission(const Statement& q) {
  SubmissionRecord s;
  s.id = q.int64(0);
  s.job_id = q.text(1);
  s.trial = q.int64(2);
  s.submitted_ms = q.int64(3);
  s.budget_day = q.text(4);
  s.status = q.text(5);
  s.result.s1 = q.real(6);
  s.result.s8 = q.real(7);
  s.result.sinf = q.real(8);
  s.result.relative_accuracy = q.real(9);
  s.result.c = q.real(10);
  s.result.final_score = q.real(11);
  s.note = q.text(12);
  return s;
}

Result<int> count_on_day(Connection& c, const std::string& day) {
  auto q = Statement::prepare(c, "SELECT COUNT(*) FROM submissions WHERE budget_day = ?");
  if (!q.ok()) return q.status();
  q.value().bind(1, day);
  auto row = q.value().step();
  if (!row.ok()) return row.status();
  return static_cast<int>(q.value().int64(0));
}

Result<SubmissionRecord> write_submission(Connection& c, const SubmissionRecord& s) {
  if (s.budget_day.empty()) return Status::Invalid("budget_day: must be set (YYYY-MM-DD)");
  auto q = Statement::prepare(c,
                              "INSERT INTO submissions (job_id, trial, submitted_ms, budget_day, status, s1, s8, "
                              "sinf, relative_accuracy, c, final_score, note) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!q.ok()) return q.status();
  Statement& st = q.value();
  st.bind(1, s.job_id)
      .bind(2, s.trial)
      .bind(3, s.submitted_ms)
      .bind(4, s.budget_day)
      .bind(5, s.status)
      .bind(6, s.result.s1)
      .bind(7, s.result.s8)
      .bind(8, s.result.sinf)
      .bind(9, s.result.relative_accuracy)
      .bind(10, s.result.c)
      .bind(11, s.result.final_score)
      .bind(12, s.note);
  Status r = st.run();
  if (!r.ok()) {
    if (sql::is_foreign_key_error(st.last_error_code())) {
      return Status::NotFound(trial_name(s.job_id, s.trial) + " not found");
    }
    return r;
  }
  SubmissionRecord out = s;
  out.id = c.last_insert_rowid();
  return out;
}

}  // namespace

const char* to_string(JobState s) {
  switch (s) {
    case JobState::kQueued: return "QUEUED";
    case JobState::kRunning: return "RUNNING";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
  }
  return "FAILED";
}

const char* to_string(TrialStatus s) {
  switch (s) {
    case TrialStatus::kRunning: return "RUNNING";
    case TrialStatus::kComplete: return "COMPLETE";
    case TrialStatus::kFailed: return "FAILED";
    case TrialStatus::kCancelled: return "CANCELLED";
    case TrialStatus::kPruned: return "PRUNED";
  }
  return "FAILED";
}

std::optional<JobState> job_state_from_string(std::string_view s) {
  for (JobState v : {JobState::kQueued, JobState::kRunning, JobState::kSucceeded, JobState::kFailed,
                     JobState::kCancelled}) {
    if (iequals(s, to_string(v))) return v;
  }
  return std::nullopt;
}

std::optional<TrialStatus> trial_status_from_string(std::string_view s) {
  for (TrialStatus v : {TrialStatus::kRunning, TrialStatus::kComplete, TrialStatus::kFailed, TrialStatus::kCancelled,
                        TrialStatus::kPruned}) {
    if (iequals(s, to_string(v))) return v;
  }
  return std::nullopt;
}

// ---- Impl: the connection pool ----

struct Store::Impl {
  std::string path;
  int version = 0;
  std::mutex mu;
  std::vector<std::unique_ptr<Connection>> idle;   // guarded by mu

  // trials_revision(): a counter taken by every trial write once it has ended (committed or not), so that a
  // reader who took the revision before reading sees a different one after any write it may have missed.
  std::mutex rev_mu;
  uint64_t rev_counter = 0;                                // guarded by rev_mu
  uint64_t every_job_changed = 0;                          // guarded by rev_mu: a write across jobs
  std::unordered_map<std::string, uint64_t> job_changed;   // guarded by rev_mu

  // Bumps the job's revision (every job's when job_id is empty) when it goes out of scope: declared before
  // the connection lease and the transaction, it runs after both ended.
  class TrialsChanged {
   public:
    TrialsChanged(Impl& impl, std::string job_id) : impl_(impl), job_id_(std::move(job_id)) {}
    ~TrialsChanged() {
      std::lock_guard<std::mutex> lock(impl_.rev_mu);
      const uint64_t r = ++impl_.rev_counter;
      if (job_id_.empty()) impl_.every_job_changed = r;
      else impl_.job_changed[job_id_] = r;
    }
    TrialsChanged(const TrialsChanged&) = delete;
    TrialsChanged& operator=(const TrialsChanged&) = delete;

   private:
    Impl& impl_;
    std::string job_id_;
  };

  // A connection lent to one caller; goes back to the pool when the lease ends.
  class Lease {
   public:
    Lease(Impl* impl, std::unique_ptr<Connection> c) : impl_(impl), c_(std::move(c)) {}
    ~Lease() {
      if (!c_) return;
      std::lock_guard<std::mutex> lock(impl_->mu);
      if (impl_->idle.size() < kMaxIdleConnections) impl_->idle.push_back(std::move(c_));
    }
    Lease(Lease&&) = default;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Connection& operator*() { return *c_; }

   private:
    Impl* impl_;
    std::unique_ptr<Connection> c_;
  };

  Result<Lease> lease() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!idle.empty()) {
        std::unique_ptr<Connection> c = std::move(idle.back());
        idle.pop_back();
        return Lease(this, std::move(c));
      }
    }
    auto c = Connection::open(path);
    if (!c.ok()) return c.status();
    return Lease(this, std::make_unique<Connection>(std::move(c).value()));
  }
};

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  auto c = Connection::open(path);
  if (!c.ok()) return c.status();
  auto v = sql::migrate(c.value(), path);
  if (!v.ok()) return v.status();
  impl->version = v.value();
  impl->idle.push_back(std::make_unique<Connection>(std::move(c).value()));
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

int Store::schema_version() const { return impl_->version; }

uint64_t Store::trials_revision(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(impl_->rev_mu);
  auto it = impl_->job_changed.find(job_id);
  return std::max(impl_->every_job_changed, it == impl_->job_changed.end() ? 0 : it->second);
}
const std::string& Store::path() const { return impl_->path; }

// ---- jobs ----

Status Store::insert_job(const JobRecord& j) {
  if (j.id.empty()) return Status::Invalid("id: a job needs an id");
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto q = Statement::prepare(c, std::string("INSERT INTO jobs (") + kJobColumns +
                                     ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!q.ok()) return q.status();
  q.value().bind(1, j.id);
  bind_job_fields(q.value(), j, 2);
  Status s = q.value().run();
  if (!s.ok() && sql::is_unique_error(q.value().last_error_code())) {
    return Status::Invalid("id: job " + j.id + " already exists");
  }
  return s;
}

Status Store::update_job(const JobRecord& j) {
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto q = Statement::prepare(c,
                              "UPDATE jobs SET name = ?, spec_yaml = ?, model = ?, device_key = ?, strategy = ?, "
                              "trial_budget = ?, state = ?, error = ?, stop_reason = ?, work_dir = ?, "
                              "created_ms = ?, started_ms = ?, finished_ms = ? WHERE id = ?");
  if (!q.ok()) return q.status();
  bind_job_fields(q.value(), j, 1);
  q.value().bind(14, j.id);
  Status s = q.value().run();
  if (!s.ok()) return s;
  if (c.changes() == 0) return Status::NotFound("job " + j.id + " not found");
  return Status::Ok();
}

Result<JobRecord> Store::get_job(const std::string& id) const {
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto q = Statement::prepare(c, std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ?");
  if (!q.ok()) return q.status();
  q.value().bind(1, id);
  auto row = q.value().step();
  if (!row.ok()) return row.status();
  if (!row.value()) return Status::NotFound("job " + id + " not found");
  return read_job(q.value());
}

std::vector<JobRecord> Store::list_jobs(int limit, int offset) const {
  std::vector<JobRecord> out;
  auto lease = impl_->lease();
  if (!lease.ok()) return out;
  Connection& c = *lease.value();
  auto q = Statement::prepare(c, std::string("SELECT ") + kJobColumns +
                                     " FROM jobs ORDER BY created_ms DESC, rowid DESC LIMIT ? OFFSET ?");
  if (!q.ok()) return out;
  q.value().bind(1, limit > 0 ? limit : -1).bind(2, std::max(offset, 0));
  while (true) {
    auto row = q.value().step();
    if (!row.ok() || !row.value()) break;
    out.push_back(read_job(q.value()));
  }
  return out;
}

std::vector<JobRecord> Store::jobs_in_state(JobState s) const {
  std::vector<JobRecord> out;
  auto lease = impl_->lease();
  if (!lease.ok()) return out;
  Connection& c = *lease.value();
  auto q = Statement::prepare(c, std::string("SELECT ") + kJobColumns +
                                     " FROM jobs WHERE state = ? ORDER BY created_ms, rowid");
  if (!q.ok()) return out;
  q.value().bind(1, to_string(s));
  while (true) {
    auto row = q.value().step();
    if (!row.ok() || !row.value()) break;
    out.push_back(read_job(q.value()));
  }
  return out;
}

// ---- trials ----

Status Store::insert_trial(const TrialRecord& t) {
  Impl::TrialsChanged changed(*impl_, t.job_id);
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto q = Statement::prepare(c,
                              "INSERT INTO trials (job_id, number, status, params_json, started_ms, "
                              "suggestion_json, engine_build, device, is_reference, fidelity) "
                              "VALUES (?,?,?,?,?,?,?,?,?,?)");
  if (!q.ok()) return q.status();
  q.value()
      .bind(1, t.job_id)
      .bind(2, t.number)
      .bind(3, to_string(TrialStatus::kRunning))
      .bind(4, params_to_json(t.params))
      .bind(5, t.started_ms)
      .bind(6, t.suggestion_json)
      .bind(7, t.engine_build)
      .bind(8, t.device)
      .bind(9, t.is_reference ? 1 : 0)
      .bind(10, t.fidelity);
  Status s = q.value().run();
  if (!s.ok()) {
    int code = q.value().last_error_code();
    if (sql::is_foreign_key_error(code)) return Status::NotFound("job " + t.job_id + " not found");
    if (sql::is_unique_error(code)) return Status::Invalid("number: " + trial_name(t.job_id, t.number) + " already exists");
    if (sql::is_constraint_error(code)) return Status::Invalid("number: " + std::to_string(t.number) + " must be >= 0");
  }
  return s;
}

Status Store::finish_trial(const TrialRecord& t) {
  if (t.status == TrialStatus::kRunning) {
    return Status::Invalid("status: finish_trial needs COMPLETE, FAILED, CANCELLED or PRUNED, not RUNNING");
  }
  Impl::TrialsChanged changed(*impl_, t.job_id);
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto tx = Transaction::begin(c, Transaction::Kind::kWrite);
  if (!tx.ok()) return tx.status();

  auto up = Statement::prepare(
      c,
      "UPDATE trials SET status = ?, relative_accuracy = ?, accuracy_metric = ?, score = ?, gate = ?, error = ?, "
      "finished_ms = ?, log_tail = ?, engine_build = ?, device = ?, peak_memory_bytes = ?, result_json = ?, "
      "params_json = CASE WHEN ?13 = 1 THEN ?14 ELSE params_json END, "
      "suggestion_json = CASE WHEN ?15 = '' THEN suggestion_json ELSE ?15 END, "
      "started_ms = CASE WHEN ?16 = 0 THEN started_ms ELSE ?16 END, "
      "failure_kind = ?19, failure_code = ?20, accuracy_proxy = ?21, early_stop_stage = ?22, early_stop_bound = ?23, "
      "early_stop_incumbent = ?24, early_stop_margin = ?25, load_s = ?26, weights_s = ?27, prepare_s = ?28, "
      "quantize_s = ?29, accuracy_s = ?30, tiers_s = ?31 "
      "WHERE job_id = ?17 AND number = ?18");
  if (!up.ok()) return up.status();
  up.value()
      .bind(1, to_string(t.status))
      .bind(2, t.relative_accuracy)
      .bind(3, t.accuracy_metric)
      .bind(4, t.score)
      .bind(5, t.gate)
      .bind(6, t.error)
      .bind(7, t.finished_ms)
      .bind(8, t.log_tail)
      .bind(9, t.engine_build)
      .bind(10, t.device)
      .bind(11, t.peak_memory_bytes)
      .bind(12, t.result_json)
      .bind(13, t.params.empty() ? 0 : 1)
      .bind(14, params_to_json(t.params))
      .bind(15, t.suggestion_json)
      .bind(16, t.started_ms)
      .bind(17, t.job_id)
      .bind(18, t.number)
      .bind(19, to_string(t.failure_kind))
      .bind(20, t.failure_code)
      .bind(21, t.accuracy_proxy ? 1 : 0)
      .bind(22, t.early_stop ? t.early_stop->stage : std::string())
      .bind(23, t.early_stop ? t.early_stop->bound : 0.0)
      .bind(24, t.early_stop ? t.early_stop->incumbent : 0.0)
      .bind(25, t.early_stop ? t.early_stop->margin : 0.0)
      .bind(26, t.timings.load_s)
      .bind(27, t.timings.weights_s)
      .bind(28, t.timings.prepare_s)
      .bind(29, t.timings.quantize_s)
      .bind(30, t.timings.accuracy_s)
      .bind(31, t.timings.tiers_s);
  Status s = up.value().run();
  if (!s.ok()) return s;
  if (c.changes() == 0) return Status::NotFound(trial_name(t.job_id, t.number) + " not found");

  auto del = Statement::prepare(c, "DELETE FROM trial_tiers WHERE job_id = ? AND number = ?");
  if (!del.ok()) return del.status();
  s = del.value().bind(1, t.job_id).bind(2, t.number).run();
  if (!s.ok()) return s;

  auto ins = Statement::prepare(c,
                                "INSERT INTO trial_tiers (job_id, number, tier, position, concurrency, duration_s, "
                                "ttft_p50_ms, ttft_p90_ms, ttft_p99_ms, tpot_p50_ms, tpot_p90_ms, tpot_p99_ms, "
                                "output_tokens_per_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!ins.ok()) return ins.status();
  for (size_t i = 0; i < t.tiers.size(); ++i) {
    const TierRecord& r = t.tiers[i];
    Statement& q = ins.value();
    q.reset();
    q.bind(1, t.job_id)
        .bind(2, t.number)
        .bind(3, r.tier)
        .bind(4, static_cast<int64_t>(i))
        .bind(5, r.concurrency)
        .bind(6, r.duration_s)
        .bind(7, r.ttft_p50_ms)
        .bind(8, r.ttft_p90_ms)
        .bind(9, r.ttft_p99_ms)
        .bind(10, r.tpot_p50_ms)
        .bind(11, r.tpot_p90_ms)
        .bind(12, r.tpot_p99_ms)
        .bind(13, r.output_tokens_per_s);
    s = q.run();
    if (!s.ok()) {
      if (sql::is_unique_error(q.last_error_code())) {
        return Status::Invalid("tiers[" + std::to_string(i) + "].tier: " + r.tier + " appears twice");
      }
      if (sql::is_constraint_error(q.last_error_code())) {
        return Status::Invalid("tiers[" + std::to_string(i) + "]: " + s.message);
      }
      return s;
    }
  }

  for (const char* table : {"trial_plans", "trial_env"}) {
    auto d = Statement::prepare(c, std::string("DELETE FROM ") + table + " WHERE job_id = ? AND number = ?");
    if (!d.ok()) return d.status();
    s = d.value().bind(1, t.job_id).bind(2, t.number).run();
    if (!s.ok()) return s;
  }
  auto plan = Statement::prepare(c, "INSERT INTO trial_plans (job_id, number, position, op, shape, choice_json) "
                                    "VALUES (?,?,?,?,?,?)");
  if (!plan.ok()) return plan.status();
  for (size_t i = 0; i < t.plans.size(); ++i) {
    Statement& q = plan.value();
    q.reset();
    q.bind(1, t.job_id).bind(2, t.number).bind(3, static_cast<int64_t>(i)).bind(4, t.plans[i].op)
        .bind(5, t.plans[i].shape).bind(6, params_to_json(t.plans[i].choice));
    s = q.run();
    if (!s.ok()) return s;
  }
  auto env = Statement::prepare(c, "INSERT INTO trial_env (job_id, number, name, value) VALUES (?,?,?,?)");
  if (!env.ok()) return env.status();
  for (const auto& [name, value] : t.env) {
    Statement& q = env.value();
    q.reset();
    q.bind(1, t.job_id).bind(2, t.number).bind(3, name).bind(4, value);
    s = q.run();
    if (!s.ok()) return s;
  }
  return tx.value().commit();
}

Result<TrialRecord> Store::get_trial(const std::string& job_id, int64_t number) const {
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto tx = Transaction::begin(c, Transaction::Kind::kRead);
  if (!tx.ok()) return tx.status();
  auto q = Statement::prepare(c, std::string("SELECT ") + kTrialColumns +
                                     " FROM trials t WHERE t.job_id = ? AND t.number = ?");
  if (!q.ok()) return q.status();
  q.value().bind(1, job_id).bind(2, number);
  auto rows = collect_trials(c, q.value());
  if (!rows.ok()) return rows.status();
  if (rows.value().empty()) {
    auto job = Statement::prepare(c, "SELECT 1 FROM jobs WHERE id = ?");
    if (job.ok()) {
      job.value().bind(1, job_id);
      auto found = job.value().step();
      if (found.ok() && !found.value()) return Status::NotFound("job " + job_id + " not found");
    }
    return Status::NotFound(trial_name(job_id, number) + " not found");
  }
  TrialRecord t = std::move(rows.value().front());
  Status s = tx.value().commit();
  if (!s.ok()) return s;
  return t;
}

Status Store::check_query(const TrialQuery& q) {
  std::string key = q.order_by;
  if (!key.empty() && key[0] == '-') key.erase(0, 1);
  if (key.empty()) key = "number";
  static const char* const kKeys[] = {"number", "score", "c1", "c8", "cinf", "accuracy"};
  if (std::none_of(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; })) {
    return Status::Invalid("order_by: '" + q.order_by +
                           "' is not one of number, score, c1, c8, cinf, accuracy (prefix '-' for descending)");
  }
  if (q.offset < 0) return Status::Invalid("offset: " + std::to_string(q.offset) + " must be >= 0");
  return Status::Ok();
}

Result<std::vector<TrialRecord>> Store::find_trials(const TrialQuery& query) const {
  Status ok = check_query(query);
  if (!ok.ok()) return ok;
  std::string key = query.order_by.empty() ? "number" : query.order_by;
  const bool desc = key[0] == '-';
  if (desc) key.erase(0, 1);
  const char* dir = desc ? "DESC" : "ASC";

  std::string sql = std::string("SELECT ") + kTrialColumns + " FROM trials t";
  std::string order;
  const bool by_tier = key == "c1" || key == "c8" || key == "cinf";
  if (by_tier) {
    sql += " LEFT JOIN trial_tiers k ON k.job_id = t.job_id AND k.number = t.number AND k.tier = ?3";
    order = std::string("(t.status <> 'COMPLETE' OR k.duration_s IS NULL), (t.fidelity < 1), k.duration_s ") + dir +
            ", t.number";
  } else if (key == "score") {
    order = std::string("(t.status <> 'COMPLETE'), (t.fidelity < 1), t.score ") + dir + ", t.number";
  } else if (key == "accuracy") {
    order = std::string("(t.status <> 'COMPLETE'), (t.fidelity < 1), t.relative_accuracy ") + dir + ", t.number";
  } else {
    order = std::string("t.number ") + dir;
  }
  sql += " WHERE t.job_id = ?1 AND (?2 = '' OR t.status = ?2) ORDER BY " + order + " LIMIT ?4 OFFSET ?5";

  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto tx = Transaction::begin(c, Transaction::Kind::kRead);
  if (!tx.ok()) return tx.status();
  auto q = Statement::prepare(c, sql);
  if (!q.ok()) return q.status();
  q.value()
      .bind(1, query.job_id)
      .bind(2, query.status ? to_string(*query.status) : "")
      .bind(4, query.limit > 0 ? query.limit : -1)
      .bind(5, query.offset);
  if (by_tier) q.value().bind(3, key);
  auto rows = collect_trials(c, q.value());
  if (!rows.ok()) return rows.status();
  Status s = tx.value().commit();
  if (!s.ok()) return s;
  return rows;
}

std::vector<TrialRecord> Store::list_trials(const TrialQuery& q) const {
  auto r = find_trials(q);
  if (!r.ok()) return {};
  return std::move(r).value();
}

int Store::count_trials(const std::string& job_id, std::optional<TrialStatus> status) const {
  auto lease = impl_->lease();
  if (!lease.ok()) return 0;
  Connection& c = *lease.value();
  auto q = Statement::prepare(c, "SELECT COUNT(*) FROM trials WHERE job_id = ?1 AND (?2 = '' OR status = ?2)");
  if (!q.ok()) return 0;
  q.value().bind(1, job_id).bind(2, status ? to_string(*status) : "");
  auto row = q.value().step();
  if (!row.ok() || !row.value()) return 0;
  return static_cast<int>(q.value().int64(0));
}

int64_t Store::next_trial_number(const std::string& job_id) const {
  auto lease = impl_->lease();
  if (!lease.ok()) return 0;
  Connection& c = *lease.value();
  auto q = Statement::prepare(c, "SELECT COALESCE(MAX(number) + 1, 0) FROM trials WHERE job_id = ?");
  if (!q.ok()) return 0;
  q.value().bind(1, job_id);
  auto row = q.value().step();
  if (!row.ok() || !row.value()) return 0;
  return q.value().int64(0);
}

std::vector<TrialRecord> Store::trials_for_device_key(const std::string& device_key,
                                                      const std::string& exclude_job) const {
  auto lease = impl_->lease();
  if (!lease.ok()) return {};
  Connection& c = *lease.value();
  auto tx = Transaction::begin(c, Transaction::Kind::kRead);
  if (!tx.ok()) return {};
  auto q = Statement::prepare(c, std::string("SELECT ") + kTrialColumns +
                                     " FROM trials t JOIN jobs j ON j.id = t.job_id WHERE j.device_key = ? AND "
                                     "t.job_id <> ? AND t.status = 'COMPLETE' AND t.fidelity >= 1 ORDER BY j.created_ms, j.rowid, "
                                     "t.number");
  if (!q.ok()) return {};
  q.value().bind(1, device_key).bind(2, exclude_job);
  auto rows = collect_trials(c, q.value());
  if (!rows.ok()) return {};
  tx.value().commit();
  return std::move(rows).value();
}

Status Store::set_trial_slurm_job(const std::string& job_id, int64_t number, int64_t slurm_job_id) {
  Impl::TrialsChanged changed(*impl_, job_id);
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto q = Statement::prepare(c, "UPDATE trials SET slurm_job_id = ? WHERE job_id = ? AND number = ?");
  if (!q.ok()) return q.status();
  Status s = q.value().bind(1, slurm_job_id).bind(2, job_id).bind(3, number).run();
  if (!s.ok()) return s;
  if (c.changes() == 0) return Status::NotFound(trial_name(job_id, number) + " not found");
  return Status::Ok();
}

Result<int> Store::fail_running_trials(const std::string& reason, bool keep_slurm_jobs) {
  Impl::TrialsChanged changed(*impl_, "");   // any job's
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto tx = Transaction::begin(c, Transaction::Kind::kWrite);
  if (!tx.ok()) return tx.status();
  auto q = Statement::prepare(c,
                              "UPDATE trials SET status = 'FAILED', error = ?, finished_ms = ?, "
                              "failure_kind = 'restart' WHERE status = 'RUNNING' AND (?3 = 0 OR slurm_job_id = 0)");
  if (!q.ok()) return q.status();
  q.value().bind(3, keep_slurm_jobs ? 1 : 0);
  Status s = q.value().bind(1, reason).bind(2, now_ms()).run();
  if (!s.ok()) return s;
  const int n = static_cast<int>(c.changes());
  s = tx.value().commit();
  if (!s.ok()) return s;
  return n;
}

// ---- submissions ----

Result<SubmissionRecord> Store::insert_submission(const SubmissionRecord& s) {
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  return write_submission(*lease.value(), s);
}

Result<SubmissionRecord> Store::insert_submission_within_budget(const SubmissionRecord& s, int per_day) {
  auto lease = impl_->lease();
  if (!lease.ok()) return lease.status();
  Connection& c = *lease.value();
  auto tx = Transaction::begin(c, Transaction::Kind::kWrite);
  if (!tx.ok()) return tx.status();
  auto used = count_on_day(c, s.budget_day);
  if (!used.ok()) return used.status();
  if (used.value() >= per_day) {
    return Status::Exhausted("the daily budget of " + std::to_string(per_day) + " submissions for " + s.budget_day +
                             " is spent (" + std::to_string(used.value()) + " recorded)");
  }
  auto r = write_submission(c, s);
  if (!r.ok()) return r;
  Status ok = tx.value().commit();
  if (!ok.ok()) return ok;
  return r;
}

std::vector<SubmissionRecord> Store::list_submissions(const std::string& job_id, int limit, int offset) const {
  std::vector<SubmissionRecord> out;
  auto lease = impl_->lease();
  if (!lease.ok()) return out;
  Connection& c = *lease.value();
  auto q = Statement::prepare(c, std::string("SELECT ") + kSubmissionColumns +
                                     " FROM submissions WHERE (?1 = '' OR job_id = ?1) ORDER BY submitted_ms, id"
                                     " LIMIT ?2 OFFSET ?3");
  if (!q.ok()) return out;
  q.value().bind(1, job_id).bind(2, limit > 0 ? limit : -1).bind(3, std::max(offset, 0));
  while (true) {
    auto row = q.value().step();
    if (!row.ok() || !row.value()) break;
    out.push_back(read_submission(q.value()));
  }
  return out;
}

int Store::count_submissions_on_day(const std::string& budget_day) const {
  auto lease = impl_->lease();
  if (!lease.ok()) return 0;
  auto n = count_on_day(*lease.value(), budget_day);
  return n.ok() ? n.value() : 0;
}

}  // namespace soartune::daemon
