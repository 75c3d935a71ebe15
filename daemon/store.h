// The SQLite trial store: jobs, trials, submissions. WAL mode, one connection per thread, a schema_version
// table with forward migrations, every multi-row write in one RAII transaction.
//
// Threads: a Store may be used from any number of threads at once. It keeps a small pool of connections and
// lends one to each call for the call's duration, so a connection is never used by two threads at the same
// time and every thread in flight effectively has its own. Under WAL, readers run concurrently with each other
// and with the one writer; writers queue on SQLite's write lock (busy timeout 10 s). Every read that spans more
// than one statement runs in one read transaction, so it sees one consistent snapshot.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/failure_kind.h"
#include "core/status.h"
#include "core/worker_result.h"

namespace soartune::daemon {

using soartune::Result;
using soartune::Status;

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled };
// kPruned: stopped early by the job's early_stop rule (daemon/early_stop_decision.h): neither COMPLETE nor FAILED.
enum class TrialStatus { kRunning, kComplete, kFailed, kCancelled, kPruned };

const char* to_string(JobState s);      // "QUEUED", "RUNNING", ...
const char* to_string(TrialStatus s);   // "RUNNING", "COMPLETE", "FAILED", "CANCELLED", "PRUNED"
// Inverse of to_string, case-insensitive; nullopt for anything else.
std::optional<JobState> job_state_from_string(std::string_view s);
std::optional<TrialStatus> trial_status_from_string(std::string_view s);

struct JobRecord {
  std::string id;                  // e.g. "job-20261202-161530-3f2a"
  std::string name;
  std::string spec_yaml;           // as submitted
  std::string model;
  std::string device_key;          // model + backend/device class, for warm starts
  std::string strategy;
  int trial_budget = 0;
  JobState state = JobState::kQueued;
  std::string error;
  std::string stop_reason;
  std::string work_dir;            // where trial files and the reference outputs live
  int64_t created_ms = 0, started_ms = 0, finished_ms = 0;
};

struct TierRecord {
  std::string tier;                // c1 / c8 / cinf
  int concurrency = 0;
  double duration_s = 0;
  double ttft_p50_ms = 0, ttft_p90_ms = 0, ttft_p99_ms = 0;
  double tpot_p50_ms = 0, tpot_p90_ms = 0, tpot_p99_ms = 0;
  double output_tokens_per_s = 0;
};

// Why a PRUNED trial was stopped: the early-stop rule's decision, as values.
struct EarlyStopFacts {
  std::string stage;               // the stage it was stopped after: "accuracy", "c1", "c8"
  double bound = 0;                // the best final score it could still reach (search::score_upper_bound)
  double incumbent = 0;            // the best full-fidelity score when it was stopped
  double margin = 0;               // the rule's margin (a fraction): stopped when bound < incumbent * (1 - margin)
};

// Where a trial's time went, in seconds, as its worker reported it (0: not reported). weights_s, prepare_s and
// quantize_s are parts of load_s (reading the weights, preparing the timed engine, quantising them).
struct TrialTimings {
  double load_s = 0, weights_s = 0, prepare_s = 0, quantize_s = 0, accuracy_s = 0, tiers_s = 0;
};

struct TrialRecord {
  std::string job_id;
  int64_t number = 0;
  TrialStatus status = TrialStatus::kRunning;
  std::map<std::string, std::string> params;
  std::vector<TierRecord> tiers;
  double relative_accuracy = 0;
  std::string accuracy_metric;
  double score = 0, gate = 0;
  std::string error;
  int64_t started_ms = 0, finished_ms = 0;
  std::string log_tail;
  std::string engine_build, device;
  int64_t peak_memory_bytes = 0;
  TrialTimings timings;            // from the worker's result, when it printed one
  std::string suggestion_json;     // search::Suggestion as JSON (why this trial was chosen)
  std::string result_json;         // the worker's JSON result (as parsed, or its stdout when it did not parse)
  bool is_reference = false;       // a run of the job's reference config (the baseline)
  FailureKind failure_kind = FailureKind::kNone;   // why it is FAILED / CANCELLED
  int failure_code = 0;            // the signal (crash) or exit status (exit_code); 0 otherwise
  std::vector<KernelPlan> plans;   // the kernel choices the worker reported
  std::map<std::string, std::string> env;   // the timing-relevant environment the worker ran with
  bool accuracy_proxy = false;     // relative_accuracy was measured on a proxy model (accuracy.model), not this one
  int64_t slurm_job_id = 0;        // the Slurm job it runs as (executor: slurm); 0 for the local executor
  double fidelity = 1.0;           // the workload fraction it ran (multi_fidelity); 1 = the full run, the only
                                   // one that is ranked, exported, planned and warm-starts other jobs
  std::optional<EarlyStopFacts> early_stop;   // PRUNED: why; its tiers and accuracy are those measured by then
};

struct OfficialResult {
  double s1 = 0, s8 = 0, sinf = 0, relative_accuracy = 0, c = 0, final_score = 0;
};

struct SubmissionRecord {
  int64_t id = 0;
  std::string job_id;
  int64_t trial = 0;
  int64_t submitted_ms = 0;
  std::string budget_day;          // YYYY-MM-DD in the budget time zone
  std::string status = "recorded";
  OfficialResult result;
  std::string note;
};

struct TrialQuery {
  std::string job_id;
  std::optional<TrialStatus> status;
  std::string order_by = "number";  // number | score | c1 | c8 | cinf | accuracy; "-" prefix: descending
  int limit = 50;
  int offset = 0;
};

class Store {
 public:
  // Opens (creating if needed) the database at `path` and migrates it to the current schema version.
  static Result<std::unique_ptr<Store>> open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  int schema_version() const;
  // Changes whenever a trial of the job may have changed through this Store (a write that ended after the
  // previous call), so a reader can keep what it read under this number. The daemon is its database's only
  // writer; a write by another process is not seen here.
  uint64_t trials_revision(const std::string& job_id) const;
  const std::string& path() const;

  Status insert_job(const JobRecord& j);
  Status update_job(const JobRecord& j);
  Result<JobRecord> get_job(const std::string& id) const;
  std::vector<JobRecord> list_jobs(int limit, int offset) const;   // newest first
  std::vector<JobRecord> jobs_in_state(JobState s) const;

  Status insert_trial(const TrialRecord& t);                       // a new RUNNING trial
  // Final status + metrics, one transaction: the trial row and its tier rows (replacing any) together.
  // t.status must not be RUNNING. params, suggestion_json and started_ms are kept from insert_trial when t
  // leaves them empty / 0; every other field is written as given.
  Status finish_trial(const TrialRecord& t);
  Result<TrialRecord> get_trial(const std::string& job_id, int64_t number) const;
  // Non-COMPLETE trials have no metrics: ordering by anything but number puts them last, either direction,
  // and low-fidelity trials (shortened workloads, not comparable) after the full-fidelity ones.
  // Ties are broken by number. limit <= 0: no limit. An invalid order_by gives an empty list; see find_trials.
  std::vector<TrialRecord> list_trials(const TrialQuery& q) const;
  // As list_trials, but an invalid query is an error naming the field and its allowed values.
  Result<std::vector<TrialRecord>> find_trials(const TrialQuery& q) const;
  static Status check_query(const TrialQuery& q);
  int count_trials(const std::string& job_id, std::optional<TrialStatus> status) const;
  int64_t next_trial_number(const std::string& job_id) const;
  // COMPLETE full-fidelity trials of other jobs with the same device_key (warm start).
  std::vector<TrialRecord> trials_for_device_key(const std::string& device_key,
                                                 const std::string& exclude_job) const;

  // Records the Slurm job a RUNNING trial was submitted as, as soon as sbatch answers.
  Status set_trial_slurm_job(const std::string& job_id, int64_t number, int64_t slurm_job_id);

  // Crash recovery: every RUNNING trial becomes FAILED (kind restart) with `reason`; returns how many. One
  // transaction. keep_slurm_jobs: trials running as Slurm jobs stay RUNNING (the daemon re-attaches to them).
  Result<int> fail_running_trials(const std::string& reason, bool keep_slurm_jobs = false);

  // Returns the record with its id. The trial must exist (kNotFound otherwise).
  Result<SubmissionRecord> insert_submission(const SubmissionRecord& s);
  // Counts s.budget_day's submissions (all jobs) and inserts only when fewer than per_day exist, in one write
  // transaction, so two concurrent callers cannot both take the last slot. kResourceExhausted when spent.
  Result<SubmissionRecord> insert_submission_within_budget(const SubmissionRecord& s, int per_day);
  // "" = all jobs; oldest first; limit 0 = all rows.
  std::vector<SubmissionRecord> list_submissions(const std::string& job_id, int limit = 0, int offset = 0) const;
  int count_submissions_on_day(const std::string& budget_day) const;   // all jobs

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace soartune::daemon
