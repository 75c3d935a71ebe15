// The store's schema as an ordered list of forward migrations. A migration is never edited once released:
// a change is a new entry at the end.
#include <chrono>
#include <string>
#include <vector>

#include "daemon/store_sqlite.h"

namespace soartune::daemon::sql {

namespace {

// v1: jobs and trials with their per-tier metrics.
constexpr const char* kV1 = R"sql(
CREATE TABLE jobs (
  id            TEXT PRIMARY KEY,
  name          TEXT NOT NULL DEFAULT '',
  spec_yaml     TEXT NOT NULL DEFAULT '',
  model         TEXT NOT NULL DEFAULT '',
  device_key    TEXT NOT NULL DEFAULT '',
  strategy      TEXT NOT NULL DEFAULT '',
  trial_budget  INTEGER NOT NULL DEFAULT 0,
  state         TEXT NOT NULL CHECK (state IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
  error         TEXT NOT NULL DEFAULT '',
  stop_reason   TEXT NOT NULL DEFAULT '',
  work_dir      TEXT NOT NULL DEFAULT '',
  created_ms    INTEGER NOT NULL DEFAULT 0,
  started_ms    INTEGER NOT NULL DEFAULT 0,
  finished_ms   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_device_key ON jobs (device_key);
CREATE INDEX jobs_by_state ON jobs (state);

CREATE TABLE trials (
  job_id             TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  number             INTEGER NOT NULL CHECK (number >= 0),
  status             TEXT NOT NULL CHECK (status IN ('RUNNING', 'COMPLETE', 'FAILED', 'CANCELLED')),
  params_json        TEXT NOT NULL DEFAULT '{}',
  relative_accuracy  REAL NOT NULL DEFAULT 0,
  accuracy_metric    TEXT NOT NULL DEFAULT '',
  score              REAL NOT NULL DEFAULT 0,
  gate               REAL NOT NULL DEFAULT 0,
  error              TEXT NOT NULL DEFAULT '',
  started_ms         INTEGER NOT NULL DEFAULT 0,
  finished_ms        INTEGER NOT NULL DEFAULT 0,
  log_tail           TEXT NOT NULL DEFAULT '',
  engine_build       TEXT NOT NULL DEFAULT '',
  device             TEXT NOT NULL DEFAULT '',
  peak_memory_bytes  INTEGER NOT NULL DEFAULT 0,
  result_json        TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, number)
);
CREATE INDEX trials_by_status ON trials (status);

CREATE TABLE trial_tiers (
  job_id               TEXT NOT NULL,
  number               INTEGER NOT NULL,
  tier                 TEXT NOT NULL,
  position             INTEGER NOT NULL,
  concurrency          INTEGER NOT NULL DEFAULT 0,
  duration_s           REAL NOT NULL,
  ttft_p50_ms          REAL NOT NULL DEFAULT 0,
  ttft_p90_ms          REAL NOT NULL DEFAULT 0,
  ttft_p99_ms          REAL NOT NULL DEFAULT 0,
  tpot_p50_ms          REAL NOT NULL DEFAULT 0,
  tpot_p90_ms          REAL NOT NULL DEFAULT 0,
  tpot_p99_ms          REAL NOT NULL DEFAULT 0,
  output_tokens_per_s  REAL NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, number, tier),
  FOREIGN KEY (job_id, number) REFERENCES trials (job_id, number) ON DELETE CASCADE
);
)sql";

// v2: official submissions against the daily budget.
constexpr const char* kV2 = R"sql(
CREATE TABLE submissions (
  id                 INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id             TEXT NOT NULL,
  trial              INTEGER NOT NULL,
  submitted_ms       INTEGER NOT NULL,
  budget_day         TEXT NOT NULL,
  status             TEXT NOT NULL DEFAULT 'recorded',
  s1                 REAL NOT NULL DEFAULT 0,
  s8                 REAL NOT NULL DEFAULT 0,
  sinf               REAL NOT NULL DEFAULT 0,
  relative_accuracy  REAL NOT NULL DEFAULT 0,
  c                  REAL NOT NULL DEFAULT 0,
  final_score        REAL NOT NULL DEFAULT 0,
  note               TEXT NOT NULL DEFAULT '',
  FOREIGN KEY (job_id, trial) REFERENCES trials (job_id, number)
);
CREATE INDEX submissions_by_day ON submissions (budget_day);
CREATE INDEX submissions_by_job ON submissions (job_id, submitted_ms);
)sql";

// v3: why the search chose each trial (the search's Suggestion as JSON).
constexpr const char* kV3 = R"sql(
ALTER TABLE trials ADD COLUMN suggestion_json TEXT NOT NULL DEFAULT '';
)sql";

// v4: typed trial facts. The failure kind and code and the reference flag become columns (existing rows get
// them from what was recorded: the suggestion's strategy, the reason's wording, once, here); the kernel plans
// and the timing-relevant environment the worker reported get their own tables.
constexpr const char* kV4 = R"sql(
ALTER TABLE trials ADD COLUMN is_reference INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN failure_kind TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN failure_code INTEGER NOT NULL DEFAULT 0;
UPDATE trials SET is_reference = 1
  WHERE json_valid(suggestion_json) AND json_extract(suggestion_json, '$.strategy') = 'reference';
UPDATE trials SET failure_kind = CASE
    WHEN status = 'CANCELLED' THEN 'cancelled'
    WHEN error = 'daemon restarted' THEN 'restart'
    WHEN error LIKE 'timeout%' THEN 'timeout'
    WHEN error LIKE 'worker did not start%' THEN 'not_started'
    WHEN error LIKE '%out of memory%' THEN 'out_of_memory'
    WHEN error LIKE 'worker crashed: killed by SIGKILL%' THEN 'out_of_memory'
    WHEN error LIKE 'worker crashed%' THEN 'crash'
    WHEN error LIKE 'worker exit code 2:%' THEN 'invalid_config'
    WHEN error LIKE 'worker exit code%' THEN 'exit_code'
    WHEN error LIKE 'garbage output%' OR error LIKE 'bad worker result%' THEN 'bad_output'
    WHEN error LIKE 'worker reported failure%' THEN 'worker_error'
    ELSE 'unknown' END
  WHERE status IN ('FAILED', 'CANCELLED');
CREATE TABLE trial_plans (
  job_id       TEXT NOT NULL,
  number       INTEGER NOT NULL,
  position     INTEGER NOT NULL,
  op           TEXT NOT NULL,
  shape        TEXT NOT NULL DEFAULT '',
  choice_json  TEXT NOT NULL DEFAULT '{}',
  PRIMARY KEY (job_id, number, position),
  FOREIGN KEY (job_id, number) REFERENCES trials (job_id, number) ON DELETE CASCADE
);
CREATE TABLE trial_env (
  job_id  TEXT NOT NULL,
  number  INTEGER NOT NULL,
  name    TEXT NOT NULL,
  value   TEXT NOT NULL,
  PRIMARY KEY (job_id, number, name),
  FOREIGN KEY (job_id, number) REFERENCES trials (job_id, number) ON DELETE CASCADE
);
)sql";

// v5: the Slurm job a trial runs as (0: none, the local executor), so a restarted daemon re-attaches to it;
// whether its accuracy was measured on a proxy model.
constexpr const char* kV5 = R"sql(
ALTER TABLE trials ADD COLUMN slurm_job_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN accuracy_proxy INTEGER NOT NULL DEFAULT 0;
)sql";

// v7: the fidelity each trial ran at (multi_fidelity: the fraction of the job's workload; 1 = the full run,
// which every earlier trial was).
constexpr const char* kV7 = R"sql(
ALTER TABLE trials ADD COLUMN fidelity REAL NOT NULL DEFAULT 1.0 CHECK (fidelity > 0 AND fidelity <= 1);
)sql";

// v8: early stop (daemon/early_stop_decision.h). A trial the runner stopped because it could no longer beat the
// incumbent ends PRUNED, with the stage it was stopped at and the rule's numbers (its best reachable score, the
// incumbent's, the margin) as values. The status CHECK is widened by widen_trial_status below.
constexpr const char* kV8 = R"sql(
ALTER TABLE trials ADD COLUMN early_stop_stage TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN early_stop_bound REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN early_stop_incumbent REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN early_stop_margin REAL NOT NULL DEFAULT 0;
)sql";

// v9: where each trial's time went, as the worker reported it (timings_s, quantization.seconds): loading (of
// which reading the weights, preparing the timed engine and quantising), the accuracy pass and the tiers. 0: not
// reported (every earlier trial, and a trial whose worker printed no result).
constexpr const char* kV9 = R"sql(
ALTER TABLE trials ADD COLUMN load_s REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN weights_s REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN prepare_s REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN quantize_s REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN accuracy_s REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN tiers_s REAL NOT NULL DEFAULT 0;
)sql";

// SQLite cannot alter a CHECK constraint, and rebuilding `trials` would cascade-delete the rows of every table
// that refers to it (foreign keys are on, and cannot be turned off inside the migration's transaction). Widening
// the constraint to one more allowed value keeps every stored row valid, which is the case SQLite documents for
// editing the schema text in place (sqlite.org/lang_altertable.html, "other kinds of table schema changes").
Status widen_trial_status(Connection& c) {
  constexpr const char* kOld = "CHECK (status IN ('RUNNING', 'COMPLETE', 'FAILED', 'CANCELLED'))";
  constexpr const char* kNew = "CHECK (status IN ('RUNNING', 'COMPLETE', 'FAILED', 'CANCELLED', 'PRUNED'))";
  auto version = Statement::prepare(c, "PRAGMA schema_version");
  if (!version.ok()) return version.status();
  auto row = version.value().step();
  if (!row.ok()) return row.status();
  const int64_t schema_cookie = version.value().int64(0);
  Status s = c.exec("PRAGMA writable_schema = ON");
  if (!s.ok()) return s;
  auto up = Statement::prepare(c, "UPDATE sqlite_master SET sql = replace(sql, ?1, ?2) "
                                  "WHERE type = 'table' AND name = 'trials' AND instr(sql, ?1) > 0");
  if (!up.ok()) return up.status();
  s = up.value().bind(1, kOld).bind(2, kNew).run();
  const int64_t changed = c.changes();
  if (s.ok()) s = c.exec("PRAGMA schema_version = " + std::to_string(schema_cookie + 1));
  Status off = c.exec("PRAGMA writable_schema = OFF");
  if (!s.ok()) return s;
  if (!off.ok()) return off;
  if (changed != 1) return Status::Internal("trials: the status CHECK constraint is not the one this step widens");
  return Status::Ok();
}

Result<int> read_version(Connection& c) {
  auto exists = Statement::prepare(c, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'");
  if (!exists.ok()) return exists.status();
  auto has = exists.value().step();
  if (!has.ok()) return has.status();
  if (!has.value()) return 0;
  auto q = Statement::prepare(c, "SELECT MAX(version) FROM schema_version");
  if (!q.ok()) return q.status();
  auto row = q.value().step();
  if (!row.ok()) return row.status();
  if (!row.value() || q.value().is_null(0)) return 0;
  return static_cast<int>(q.value().int64(0));
}

}  // namespace

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> kMigrations = {
      {1, "jobs, trials and per-tier metrics", kV1},
      {2, "official submissions", kV2},
      {3, "trial suggestion (why the search chose it)", kV3},
      {4, "typed trial facts: failure kind, reference flag, kernel plans, environment", kV4},
      {5, "the Slurm job each trial runs as; proxy accuracy flag", kV5},
      {6, "text repaired to valid UTF-8 (bad bytes stored by older builds become U+FFFD)", "", repair_text_encoding},
      {7, "the fidelity (workload fraction) of each trial", kV7, nullptr},
      {8, "trial status PRUNED (stopped early) with the stage and the rule's numbers", kV8, widen_trial_status},
      {9, "where each trial's time went: load (weights, engine preparation, quantisation), accuracy, tiers", kV9,
       nullptr},
  };
  return kMigrations;
}

int latest_schema_version() { return migrations().back().version; }

Result<int> migrate(Connection& c, const std::string& path) {
  auto current = read_version(c);
  if (!current.ok()) return current.status();
  if (current.value() > latest_schema_version()) {
    return Status::Precondition("database " + path + " has schema version " + std::to_string(current.value()) +
                                ", newer than the " + std::to_string(latest_schema_version()) +
                                " this build knows; open it with a newer soartuned");
  }
  for (const Migration& m : migrations()) {
    // The write lock is taken first and the version re-read under it, so two processes opening the same new
    // database do not both apply a migration.
    auto tx = Transaction::begin(c, Transaction::Kind::kWrite);
    if (!tx.ok()) return tx.status();
    auto v = read_version(c);
    if (!v.ok()) return v.status();
    if (v.value() >= m.version) continue;
    if (v.value() != m.version - 1) {
      return Status::Internal("database " + path + ": schema version " + std::to_string(v.value()) +
                              " has no migration to " + std::to_string(m.version));
    }
    Status s = c.exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_ms INTEGER "
                      "NOT NULL DEFAULT 0)");
    if (!s.ok()) return s;
    s = c.exec(m.sql);
    if (s.ok() && m.rewrite) s = m.rewrite(c);
    if (!s.ok()) {
      return Status::Internal("database " + path + ": migration to version " + std::to_string(m.version) + " (" +
                              m.description + ") failed: " + s.message);
    }
    auto bump = Statement::prepare(c, "INSERT INTO schema_version (version, applied_ms) VALUES (?, ?)");
    if (!bump.ok()) return bump.status();
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
    s = bump.value().bind(1, m.version).bind(2, now_ms).run();
    if (!s.ok()) return s;
    s = tx.value().commit();
    if (!s.ok()) return s;
  }
  return read_version(c);
}

}  // namespace soartune::daemon::sql
