// A database written by an older soartuned that stored worker text unchecked: bytes that are not UTF-8 in a job's
// name and spec, a trial's error, log tail and result, a submission's note. Opening it repairs them (schema step
// v6), and every listing the CLI makes works again, showing U+FFFD where the bad bytes were.
#include <sqlite3.h>

#include <string>

#include <gtest/gtest.h>

#include "daemon/store_sqlite.h"
#include "daemon_process.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::Daemon;
using testing::TempDir;

const std::string kReplacement = "\xEF\xBF\xBD";

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Executes `sql` on the raw file, failing the test with SQLite's message.
void exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "") << "\n" << sql;
}

// A schema-v4 database as soartuned of that version left it, with invalid bytes (X'FF', X'C3' cut off, X'80')
// where worker output and client text used to land.
void write_v4_database(const std::string& path) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  exec(db, "CREATE TABLE schema_version (version INTEGER NOT NULL, applied_ms INTEGER NOT NULL DEFAULT 0)");
  for (const sql::Migration& m : sql::migrations()) {
    if (m.version > 4) break;
    exec(db, m.sql);
    exec(db, "INSERT INTO schema_version VALUES (" + std::to_string(m.version) + ", 0)");
  }
  const std::string t = std::to_string(now_ms() - 60000);
  const std::string spec =
      "name: old\nmodel: synthetic:tiny\nbackend: cpu\nbudget: {trials: 2}\n"
      "workload: {requests: [{input_len: 8, output_len: 4, count: 1}]}\n"
      "space: {weight_bits: {type: choice, values: [16, 8]}}\n";
  exec(db, "INSERT INTO jobs (id, name, spec_yaml, model, strategy, trial_budget, state, error, created_ms, "
           "started_ms, finished_ms) VALUES ('job-old', 'caf' || CAST(X'C3' AS TEXT) || '-run', '" + spec +
           "# note ' || CAST(X'FF' AS TEXT) || '\n', 'synthetic:tiny', 'bo', 2, 'SUCCEEDED', '', " + t + ", " + t +
           ", " + t + ")");
  const std::string result =
      R"({"ok": true, "device": "cpu ' || CAST(X'FE' AS TEXT) || '", "tiers": [)"
      R"({"tier": "c1", "concurrency": 1, "duration_s": 1.5}, {"tier": "c8", "concurrency": 8, "duration_s": 0.5},)"
      R"({"tier": "cinf", "concurrency": 0, "duration_s": 0.25}], "accuracy": {"relative_pct": 100}})";
  exec(db, "INSERT INTO trials (job_id, number, status, params_json, relative_accuracy, accuracy_metric, score, gate, "
           "error, started_ms, finished_ms, log_tail, device, result_json, suggestion_json, is_reference) VALUES "
           "('job-old', 0, 'COMPLETE', '{\"weight_bits\": 16}', 100, 'fidelity', 100, 1, '', " + t + ", " + t +
           ", 'loading ' || CAST(X'80' AS TEXT) || ' weights', 'cpu', '" + result +
           "', '{\"strategy\": \"reference\"}', 1)");
  for (auto [tier, pos, dur] : {std::tuple{"c1", 0, "1.5"}, {"c8", 1, "0.5"}, {"cinf", 2, "0.25"}})
    exec(db, std::string("INSERT INTO trial_tiers (job_id, number, tier, position, duration_s) VALUES ('job-old', 0, '") +
                 tier + "', " + std::to_string(pos) + ", " + dur + ")");
  exec(db, "INSERT INTO trials (job_id, number, status, params_json, error, started_ms, finished_ms, log_tail, "
           "failure_kind) VALUES ('job-old', 1, 'FAILED', '{\"weight_bits\": 8}', 'garbage output: ' || "
           "CAST(X'FFFE' AS TEXT) || ' end', " + t + ", " + t + ", 'stderr ' || CAST(X'C3' AS TEXT), 'bad_output')");
  exec(db, "INSERT INTO submissions (job_id, trial, submitted_ms, budget_day, s1, s8, sinf, relative_accuracy, c, "
           "final_score, note) VALUES ('job-old', 0, " + t + ", '2026-12-04', 90, 90, 90, 99, 1, 90, 'ran ' || "
           "CAST(X'FF' AS TEXT) || ' fine')");
  sqlite3_close(db);
}

std::string scalar(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* st = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char* p = sqlite3_column_text(st, 0);
    out.assign(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(st, 0)));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

TEST(StoreRepair, AnOlderDatabaseWithBadBytesIsRepairedAndEveryListingWorks) {
  TempDir dir;
  const std::string db = dir.file("soartune.db");
  write_v4_database(db);
  ASSERT_EQ(scalar(db, "SELECT error FROM trials WHERE number = 1"), "garbage output: \xFF\xFE end");

  Daemon d(dir, {});
  ASSERT_TRUE(d.start()) << d.log();
  ProcessResult jobs = d.cli({"jobs"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err_tail;
  EXPECT_NE(jobs.out.find("caf" + kReplacement + "-run"), std::string::npos) << jobs.out;
  ProcessResult status = d.cli({"status", "job-old"});
  EXPECT_EQ(status.exit_code, 0) << status.err_tail;
  ProcessResult trials = d.cli({"trials", "job-old"});
  ASSERT_EQ(trials.exit_code, 0) << trials.err_tail;
  EXPECT_NE(trials.out.find(kReplacement), std::string::npos) << trials.out;
  ProcessResult show = d.cli({"show", "job-old", "1"});
  ASSERT_EQ(show.exit_code, 0) << show.err_tail;
  EXPECT_NE(show.out.find("garbage output: " + kReplacement + kReplacement + " end"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("stderr " + kReplacement), std::string::npos) << show.out;
  ProcessResult show0 = d.cli({"show", "job-old", "0", "--json"});
  ASSERT_EQ(show0.exit_code, 0) << show0.err_tail;
  EXPECT_NE(show0.out.find("loading " + kReplacement + " weights"), std::string::npos) << show0.out;
  ProcessResult subs = d.cli({"submissions", "--json"});
  ASSERT_EQ(subs.exit_code, 0) << subs.err_tail;
  EXPECT_NE(subs.out.find("ran " + kReplacement + " fine"), std::string::npos) << subs.out;

  // The file itself holds valid text now, at the latest schema version, and is sound.
  EXPECT_EQ(scalar(db, "SELECT MAX(version) FROM schema_version"), std::to_string(sql::latest_schema_version()));
  EXPECT_EQ(scalar(db, "SELECT result_json FROM trials WHERE number = 0").find("\"cpu " + kReplacement + "\""),
            scalar(db, "SELECT result_json FROM trials WHERE number = 0").find("\"cpu "));
  EXPECT_EQ(scalar(db, "SELECT spec_yaml FROM jobs").find("# note " + kReplacement) != std::string::npos, true);
  EXPECT_EQ(scalar(db, "PRAGMA integrity_check"), "ok");
}

}  // namespace
}  // namespace soartune::daemon
