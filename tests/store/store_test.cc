#include "daemon/store.h"

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/store_sqlite.h"
#include "store_db_dir.h"

namespace soartune::daemon {
namespace {

namespace fs = std::filesystem;
using soartune::Code;

class StoreTest : public testing::StoreDbDir {
 protected:
  std::unique_ptr<Store> open() {
    auto s = Store::open(path_);
    EXPECT_TRUE(s.ok()) << s.status().message;
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Runs SQL on the database file directly, bypassing the store.
  void raw_exec(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    std::string msg = err ? err : "";
    sqlite3_free(err);
    sqlite3_close(db);
    ASSERT_EQ(rc, SQLITE_OK) << msg;
  }

  std::string raw_scalar(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    std::string out;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0)) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  }
};

JobRecord make_job(const std::string& id, int64_t created_ms, const std::string& device_key = "synthetic:tiny/cpu") {
  JobRecord j;
  j.id = id;
  j.name = "name of " + id;
  j.spec_yaml = "model: synthetic:tiny\nbudget: {trials: 4}\n";
  j.model = "synthetic:tiny";
  j.device_key = device_key;
  j.strategy = "random";
  j.trial_budget = 4;
  j.state = JobState::kRunning;
  j.work_dir = "/tmp/" + id;
  j.created_ms = created_ms;
  j.started_ms = created_ms + 1;
  return j;
}

TrialRecord running_trial(const std::string& job, int64_t number) {
  TrialRecord t;
  t.job_id = job;
  t.number = number;
  t.params = {{"weight_bits", number % 2 ? "4" : "16"}, {"kv_cache_dtype", "bf16"}};
  t.started_ms = 1000 + number;
  t.suggestion_json = R"({"strategy":"random"})";
  return t;
}

TrialRecord complete_trial(const std::string& job, int64_t number, double score, double acc,
                           std::array<double, 3> durations) {
  TrialRecord t = running_trial(job, number);
  t.status = TrialStatus::kComplete;
  t.score = score;
  t.gate = acc > 99 ? 1.0 : 0.96;
  t.relative_accuracy = acc;
  t.accuracy_metric = "task";
  t.finished_ms = 2000 + number;
  t.log_tail = "done\n";
  t.engine_build = "0.1.0+abc";
  t.device = "cpu: 2 threads";
  t.peak_memory_bytes = 1 << 20;
  t.result_json = R"({"ok":true})";
  const char* names[] = {"c1", "c8", "cinf"};
  const int conc[] = {1, 8, 0};
  for (int i = 0; i < 3; ++i) {
    TierRecord r;
    r.tier = names[i];
    r.concurrency = conc[i];
    r.duration_s = durations[i];
    r.ttft_p50_ms = 1 + i;
    r.ttft_p90_ms = 2 + i;
    r.ttft_p99_ms = 3 + i;
    r.tpot_p50_ms = 4 + i;
    r.tpot_p90_ms = 5 + i;
    r.tpot_p99_ms = 6 + i;
    r.output_tokens_per_s = 100.0 * (i + 1);
    t.tiers.push_back(r);
  }
  return t;
}

TrialRecord failed_trial(const std::string& job, int64_t number, const std::string& why) {
  TrialRecord t = running_trial(job, number);
  t.status = TrialStatus::kFailed;
  t.error = why;
  t.finished_ms = 3000 + number;
  return t;
}

std::vector<int64_t> numbers(const std::vector<TrialRecord>& ts) {
  std::vector<int64_t> out;
  for (const auto& t : ts) out.push_back(t.number);
  return out;
}

// ---- schema and migrations ----

TEST_F(StoreTest, NewDatabaseIsAtLatestVersionInWalMode) {
  auto store = open();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->schema_version(), sql::latest_schema_version());
  EXPECT_EQ(store->path(), path_);
  EXPECT_EQ(raw_scalar("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw_scalar("SELECT MAX(version) FROM schema_version"), std::to_string(sql::latest_schema_version()));
  // One row per applied migration, in order.
  EXPECT_EQ(raw_scalar("SELECT COUNT(*) FROM schema_version"), std::to_string(sql::migrations().size()));
}

TEST_F(StoreTest, MigrationsAreOrderedAndConsecutive) {
  const auto& ms = sql::migrations();
  ASSERT_FALSE(ms.empty());
  for (size_t i = 0; i < ms.size(); ++i) EXPECT_EQ(ms[i].version, static_cast<int>(i) + 1);
}

TEST_F(StoreTest, Version1DatabaseMigratesForwardAndKeepsData) {
  // A database as the first release wrote it, built by hand from migration 1 alone.
  raw_exec("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_ms INTEGER NOT NULL DEFAULT 0);"
           "INSERT INTO schema_version (version) VALUES (1);");
  raw_exec(sql::migrations()[0].sql);
  raw_exec("INSERT INTO jobs (id, name, spec_yaml, model, state, trial_budget, created_ms) "
           "VALUES ('job-old', 'old', 'model: synthetic:tiny', 'synthetic:tiny', 'SUCCEEDED', 3, 42);"
           "INSERT INTO trials (job_id, number, status, params_json, score, relative_accuracy) "
           "VALUES ('job-old', 0, 'COMPLETE', '{\"weight_bits\":\"16\"}', 93.5, 100.0);"
           "INSERT INTO trial_tiers (job_id, number, tier, position, concurrency, duration_s) "
           "VALUES ('job-old', 0, 'c1', 0, 1, 1.5), ('job-old', 0, 'c8', 1, 8, 2.5);");

  auto store = open();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->schema_version(), sql::latest_schema_version());

  auto job = store->get_job("job-old");
  ASSERT_TRUE(job.ok()) << job.status().message;
  EXPECT_EQ(job.value().name, "old");
  EXPECT_EQ(job.value().state, JobState::kSucceeded);
  EXPECT_EQ(job.value().trial_budget, 3);
  EXPECT_EQ(job.value().created_ms, 42);

  auto trial = store->get_trial("job-old", 0);
  ASSERT_TRUE(trial.ok()) << trial.status().message;
  EXPECT_EQ(trial.value().status, TrialStatus::kComplete);
  EXPECT_DOUBLE_EQ(trial.value().score, 93.5);
  EXPECT_EQ(trial.value().params.at("weight_bits"), "16");
  ASSERT_EQ(trial.value().tiers.size(), 2u);
  EXPECT_EQ(trial.value().tiers[1].tier, "c8");
  EXPECT_DOUBLE_EQ(trial.value().tiers[1].duration_s, 2.5);
  EXPECT_EQ(trial.value().suggestion_json, "");   // the column a later migration added

  // The later tables work on the migrated database.
  SubmissionRecord sub;
  sub.job_id = "job-old";
  sub.trial = 0;
  sub.budget_day = "2026-12-02";
  auto inserted = store->insert_submission(sub);
  ASSERT_TRUE(inserted.ok()) << inserted.status().message;
  EXPECT_GT(inserted.value().id, 0);

  // Reopening an up-to-date database applies nothing again.
  store.reset();
  store = open();
  ASSERT_TRUE(store);
  EXPECT_EQ(raw_scalar("SELECT COUNT(*) FROM schema_version"), std::to_string(sql::migrations().size()));
  EXPECT_EQ(store->list_submissions("job-old").size(), 1u);
}

TEST_F(StoreTest, DatabaseFromNewerBuildIsRefusedAndLeftAlone) {
  { ASSERT_TRUE(open()); }
  const int newer = sql::latest_schema_version() + 1;
  raw_exec("INSERT INTO schema_version (version) VALUES (" + std::to_string(newer) + ")");
  auto s = Store::open(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code, Code::kFailedPrecondition);
  EXPECT_NE(s.status().message.find("newer"), std::string::npos) << s.status().message;
  EXPECT_NE(s.status().message.find(std::to_string(newer)), std::string::npos) << s.status().message;
  EXPECT_EQ(raw_scalar("SELECT MAX(version) FROM schema_version"), std::to_string(newer));
}

TEST_F(StoreTest, UnopenablePathIsAnError) {
  auto s = Store::open((dir_ / "no-such-dir" / "x.db").string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message.find("no-such-dir"), std::string::npos) << s.status().message;
}

// ---- transactions ----

TEST_F(StoreTest, TransactionRollsBackUnlessCommitted) {
  { ASSERT_TRUE(open()); }
  auto c = sql::Connection::open(path_);
  ASSERT_TRUE(c.ok());
  {
    auto tx = sql::Transaction::begin(c.value(), sql::Transaction::Kind::kWrite);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(c.value().exec("INSERT INTO jobs (id, state) VALUES ('a', 'QUEUED')").ok());
  }   // destroyed without commit
  EXPECT_EQ(raw_scalar("SELECT COUNT(*) FROM jobs"), "0");
  {
    auto tx = sql::Transaction::begin(c.value(), sql::Transaction::Kind::kWrite);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(c.value().exec("INSERT INTO jobs (id, state) VALUES ('b', 'QUEUED')").ok());
    ASSERT_TRUE(tx.value().commit().ok());
    EXPECT_FALSE(tx.value().commit().ok());   // a finished transaction cannot commit twice
  }
  EXPECT_EQ(raw_scalar("SELECT id FROM jobs"), "b");
}

TEST_F(StoreTest, FailureMidWriteLeavesNothing) {
  auto store = open();
  ASSERT_TRUE(store->insert_job(make_job("j", 1)).ok());
  ASSERT_TRUE(store->insert_trial(running_trial("j", 0)).ok());

  // The trial row updates first; the second tier row then violates the tier key: all of it must roll back.
  TrialRecord bad = complete_trial("j", 0, 90, 99.5, {1, 2, 3});
  bad.tiers[1].tier = "c1";
  Status s = store->finish_trial(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_NE(s.message.find("tiers[1].tier"), std::string::npos) << s.message;

  auto t = store->get_trial("j", 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.value().status, TrialStatus::kRunning);
  EXPECT_DOUBLE_EQ(t.value().score, 0);
  EXPECT_TRUE(t.value().tiers.empty());
  EXPECT_EQ(raw_scalar("SELECT COUNT(*) FROM trial_tiers"), "0");

  // The same write without the fault goes through whole.
  ASSERT_TRUE(store->finish_trial(complete_trial("j", 0, 90, 99.5, {1, 2, 3})).ok());
  t = store->get_trial("j", 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.value().status, TrialStatus::kComplete);
  EXPECT_EQ(t.value().tiers.size(), 3u);
}

TEST_F(StoreTest, FinishTrialReplacesTiersAndKeepsInsertFields) {
  auto store = open();
  ASSERT_TRUE(store->insert_job(make_job("j", 1)).ok());
  ASSERT_TRUE(store->insert_trial(running_trial("j", 1)).ok());
  ASSERT_TRUE(store->finish_trial(complete_trial("j", 1, 50, 99.5, {1, 2, 3})).ok());

  TrialRecord again;   // only the result fields: params, suggestion and start time stay as inserted
  again.job_id = "j";
  again.number = 1;
  again.status = TrialStatus::kComplete;
  again.score = 60;
  again.tiers = {TierRecord{"c1", 1, 0.5}};
  ASSERT_TRUE(store->finish_trial(again).ok());
  auto t = store->get_trial("j", 1);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t.value().score, 60);
  ASSERT_EQ(t.value().tiers.size(), 1u);
  EXPECT_DOUBLE_EQ(t.value().tiers[0].duration_s, 0.5);
  EXPECT_EQ(t.value().params, running_trial("j", 1).params);
  EXPECT_EQ(t.value().suggestion_json, running_trial("j", 1).suggestion_json);
  EXPECT_EQ(t.value().started_ms, running_trial("j", 1).started_ms);
}

TEST_F(StoreTest, TrialWriteErrorsNameTheProblem) {
  auto store = open();
  Status s = store->insert_trial(running_trial("missing", 0));
  EXPECT_EQ(s.code, Code::kNotFound) << s.message;
  EXPECT_NE(s.message.find("missing"), std::string::npos);

  ASSERT_TRUE(store->insert_job(make_job("j", 1)).ok());
  ASSERT_TRUE(store->insert_trial(running_trial("j", 0)).ok());
  s = store->insert_trial(running_trial("j", 0));
  EXPECT_EQ(s.code, Code::kInvalidArgument) << s.message;
  EXPECT_NE(s.message.find("already exists"), std::string::npos);
  s = store->insert_trial(running_trial("j", -1));
  EXPECT_EQ(s.code, Code::kInvalidArgument) << s.message;

  TrialRecord still_running = running_trial("j", 0);
  s = store->finish_trial(still_running);
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_NE(s.message.find("status"), std::string::npos);

  s = store->finish_trial(failed_trial("j", 7, "x"));
  EXPECT_EQ(s.code, Code::kNotFound) << s.message;

  auto t = store->get_trial("j", 7);
  EXPECT_EQ(t.status().code, Code::kNotFound);
  t = store->get_trial("nope", 0);
  EXPECT_EQ(t.status().code, Code::kNotFound);
  EXPECT_NE(t.status().message.find("job nope"), std::string::npos) << t.status().message;
}

// ---- jobs ----

TEST_F(StoreTest, JobsRoundTripListNewestFirstAndFilterByState) {
  auto store = open();
  ASSERT_TRUE(store->insert_job(make_job("a", 100)).ok());
  ASSERT_TRUE(store->insert_job(make_job("b", 300)).ok());
  ASSERT_TRUE(store->insert_job(make_job("c", 200)).ok());

  Status dup = store->insert_job(make_job("a", 5));
  EXPECT_EQ(dup.code, Code::kInvalidArgument);
  EXPECT_NE(dup.message.find("already exists"), std::string::npos);
  EXPECT_EQ(store->insert_job(JobRecord{}).code, Code::kInvalidArgument);

  std::vector<std::string> ids;
  for (const auto& j : store->list_jobs(0, 0)) ids.push_back(j.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"b", "c", "a"}));
  auto page = store->list_jobs(1, 1);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].id, "c");

  JobRecord c = store->get_job("c").value();
  c.state = JobState::kSucceeded;
  c.stop_reason = "budget";
  c.error = "";
  c.finished_ms = 999;
  ASSERT_TRUE(store->update_job(c).ok());
  auto got = store->get_job("c");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value().state, JobState::kSucceeded);
  EXPECT_EQ(got.value().stop_reason, "budget");
  EXPECT_EQ(got.value().finished_ms, 999);
  EXPECT_EQ(got.value().spec_yaml, make_job("c", 0).spec_yaml);
  EXPECT_EQ(got.value().work_dir, "/tmp/c");

  auto running = store->jobs_in_state(JobState::kRunning);
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[0].id, "a");   // oldest first: the order to resume them in
  EXPECT_EQ(running[1].id, "b");

  EXPECT_EQ(store->update_job(make_job("zz", 1)).code, Code::kNotFound);
  EXPECT_EQ(store->get_job("zz").status().code, Code::kNotFound);
}

TEST(StoreEnums, TextRoundTrip) {
  for (auto s : {TrialStatus::kRunning, TrialStatus::kComplete, TrialStatus::kFailed, TrialStatus::kCancelled}) {
    EXPECT_EQ(trial_status_from_string(to_string(s)), s);
  }
  for (auto s : {JobState::kQueued, JobState::kRunning, JobState::kSucceeded, JobState::kFailed,
                 JobState::kCancelled}) {
    EXPECT_EQ(job_state_from_string(to_string(s)), s);
  }
  EXPECT_EQ(trial_status_from_string("complete"), TrialStatus::kComplete);
  EXPECT_FALSE(trial_status_from_string("done").has_value());
  EXPECT_FALSE(job_state_from_string("").has_value());
}

// ---- crash recovery ----

// Every failure kind the daemon can record comes back from the store as the same value, with its code; the
// reference flag, the kernel plans and the environment come back too.
TEST_F(StoreTest, TypedTrialFactsRoundTrip) {
  auto store = open();
  ASSERT_TRUE(store->insert_job(make_job("j", 1)).ok());
  const FailureKind kinds[] = {FailureKind::kInvalidConfig, FailureKind::kOutOfMemory, FailureKind::kCrash,
                               FailureKind::kTimeout,       FailureKind::kExitCode,    FailureKind::kBadOutput,
                               FailureKind::kWorkerError,   FailureKind::kNotStarted,  FailureKind::kCancelled,
                               FailureKind::kRestart,       FailureKind::kUnknown,     FailureKind::kNodeFailure,
                               FailureKind::kPreempted};
  int64_t n = 0;
  for (FailureKind k : kinds) {
    TrialRecord t = running_trial("j", n);
    ASSERT_TRUE(store->insert_trial(t).ok());
    t = failed_trial("j", n, std::string("because ") + to_string(k));
    if (k == FailureKind::kCancelled) t.status = TrialStatus::kCancelled;
    t.failure_kind = k;
    t.failure_code = static_cast<int>(n) + 1;
    ASSERT_TRUE(store->finish_trial(t).ok());
    auto back = store->get_trial("j", n);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back.value().failure_kind, k) << to_string(k);
    EXPECT_EQ(failure_kind_from_string(to_string(k)), k);
    EXPECT_EQ(back.value().failure_code, static_cast<int>(n) + 1);
    EXPECT_FALSE(back.value().is_reference);
    ++n;
  }
  TrialRecord ref = running_trial("j", n);
  ref.is_reference = true;
  ASSERT_TRUE(store->insert_trial(ref).ok());
  TrialRecord done = complete_trial("j", n, 90, 100, {1, 2, 3});
  done.plans = {{"gemv", "m1 n64 k64", {{"variant", "m1w8u2b4"}}}, {"attention_decode", "h8 d64", {{"splits", "4"}}}};
  done.env = {{"CUDA_VISIBLE_DEVICES", "3"}, {"OMP_NUM_THREADS", "2"}};
  ASSERT_TRUE(store->finish_trial(done).ok());
  auto back = store->list_trials(TrialQuery{"j", TrialStatus::kComplete});
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(back[0].is_reference);
  EXPECT_EQ(back[0].failure_kind, FailureKind::kNone);
  ASSERT_EQ(back[0].plans.size(), 2u);
  EXPECT_EQ(back[0].plans[0].op, "gemv");
  EXPECT_EQ(back[0].plans[0].choice.at("variant"), "m1w8u2b4");
  EXPECT_EQ(back[0].plans[1].shape, "h8 d64");
  EXPECT_EQ(back[0].env, done.env);
}

// A version-3 database gets the typed columns from what it recorded: the reference from the suggestion, the
// failure kind from the reason.
TEST_F(StoreTest, Version3DatabaseGetsFailureKindsAndTheReferenceFlag) {
  raw_exec("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_ms INTEGER NOT NULL DEFAULT 0);"
           "INSERT INTO schema_version (version) VALUES (1), (2), (3);");
  for (int v = 0; v < 3; ++v) raw_exec(sql::migrations()[static_cast<size_t>(v)].sql);
  raw_exec("INSERT INTO jobs (id, state) VALUES ('old', 'SUCCEEDED');"
           "INSERT INTO trials (job_id, number, status, suggestion_json, error) VALUES "
           "('old', 0, 'COMPLETE', '{\"strategy\":\"reference\"}', ''),"
           "('old', 1, 'FAILED', '{\"strategy\":\"bayes\"}', 'worker crashed: killed by SIGSEGV'),"
           "('old', 2, 'FAILED', '', 'daemon restarted'),"
           "('old', 3, 'FAILED', '', 'worker exit code 2: launch.kv_cache_dtype: fp9'),"
           "('old', 4, 'FAILED', '', 'timeout: no result within 5 s; worker killed'),"
           "('old', 5, 'CANCELLED', '', 'cancelled by CancelJob'),"
           "('old', 6, 'FAILED', '', 'worker exit code 1: cudaMalloc: out of memory');");
  auto store = open();
  ASSERT_TRUE(store);
  auto ts = store->list_trials(TrialQuery{"old"});
  ASSERT_EQ(ts.size(), 7u);
  EXPECT_TRUE(ts[0].is_reference);
  EXPECT_FALSE(ts[1].is_reference);
  const FailureKind want[] = {FailureKind::kNone,    FailureKind::kCrash,     FailureKind::kRestart,
                              FailureKind::kInvalidConfig, FailureKind::kTimeout, FailureKind::kCancelled,
                              FailureKind::kOutOfMemory};
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(ts[i].failure_kind, want[i]) << i;
}

TEST_F(StoreTest, RunningTrialsFailOnRecovery) {
  {
    auto store = open();
    ASSERT_TRUE(store->insert_job(make_job("j", 1)).ok());
    ASSERT_TRUE(store->insert_trial(running_trial("j", 0)).ok());
    ASSERT_TRUE(store->finish_trial(complete_trial("j", 0, 90, 100, {1, 2, 3})).ok());
    ASSERT_TRUE(store->insert_trial(running_trial("j", 1)).ok());
    ASSERT_TRUE(store->insert_trial(running_trial("j", 2)).ok());
  }
  auto store = open();
  auto n = store->fail_running_trials("daemon restarted");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value(), 2);
  for (int64_t k : {1, 2}) {
    auto t = store->get_trial("j", k);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t.value().status, TrialStatus::kFailed);
    EXPECT_EQ(t.value().error, "daemon restarted");
    EXPECT_EQ(t.value().failure_kind, FailureKind::kRestart);
    EXPECT_GT(t.value().finished_ms, 0);
  }
  auto done = store->get_trial("j", 0);
  EXPECT_EQ(done.value().status, TrialStatus::kComplete);
  EXPECT_EQ(done.value().error, "");
  EXPECT_EQ(store->fail_running_trials("again").value(), 0);
  EXPECT_EQ(store->count_trials("j", TrialStatus::kRunning), 0);
}

// Trials running as Slurm jobs keep their job id, and a restart that re-attaches leaves them RUNNING while the
// others fail; the proxy-accuracy flag comes back as written.
TEST_F(StoreTest, SlurmJobIdsSurviveARestartThatReattachesAndTheProxyFlagRoundTrips) {
  auto store = open();
  ASSERT_TRUE(store->insert_job(make_job("j", 1)).ok());
  for (int64_t k : {0, 1, 2}) ASSERT_TRUE(store->insert_trial(running_trial("j", k)).ok());
  ASSERT_TRUE(store->set_trial_slurm_job("j", 1, 4242).ok());
  EXPECT_EQ(store->set_trial_slurm_job("j", 9, 1).code, Code::kNotFound);
  EXPECT_EQ(store->get_trial("j", 1).value().slurm_job_id, 4242);
  EXPECT_EQ(store->get_trial("j", 0).value().slurm_job_id, 0);

  EXPECT_EQ(store->fail_running_trials("daemon restarted", /*keep_slurm_jobs=*/true).value(), 2);
  EXPECT_EQ(store->get_trial("j", 1).value().status, TrialStatus::kRunning);
  EXPECT_EQ(store->get_trial("j", 2).value().failure_kind, FailureKind::kRestart);

  TrialRecord done = complete_trial("j", 1, 90, 97.5, {1, 2, 3});
  done.accuracy_proxy = true;
  ASSERT_TRUE(store->finish_trial(done).ok());
  auto back = store->get_trial("j", 1);
  EXPECT_TRUE(back.value().accuracy_proxy);
  EXPECT_EQ(back.value().slurm_job_id, 4242);
  EXPECT_EQ(back.value().status, TrialStatus::kComplete);
  EXPECT_FALSE(store->get_trial("j", 0).value().accuracy_proxy);
}

TEST_F(StoreTest, ProcessKilledMidTransactionLosesOnlyTheUncommittedWrite) {
  {
    auto store = open();
    ASSERT_TRUE(store->insert_job(make_job("j", 1)).ok());
    ASSERT_TRUE(store->insert_trial(running_trial("j", 0)).ok());
    ASSERT_TRUE(store->insert_trial(running_trial("j", 1)).ok());
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: commit trial 0, then die by SIGKILL in the middle of writing trial 1.
    auto store = Store::open(path_);
    if (!store.ok() || !store.value()->finish_trial(complete_trial("j", 0, 80, 99.5, {1, 2, 3})).ok()) _exit(3);
    auto c = sql::Connection::open(path_);
    if (!c.ok()) _exit(4);
    auto tx = sql::Transaction::begin(c.value(), sql::Transaction::Kind::kWrite);
    if (!tx.ok()) _exit(5);
    c.value().exec("UPDATE trials SET status = 'COMPLETE', score = 70 WHERE number = 1");
    c.value().exec("INSERT INTO trial_tiers (job_id, number, tier, position, duration_s) VALUES ('j', 1, 'c1', 0, 9)");
    raise(SIGKILL);
    _exit(6);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);

  auto store = open();
  ASSERT_TRUE(store);
  auto t0 = store->get_trial("j", 0);
  ASSERT_TRUE(t0.ok());
  EXPECT_EQ(t0.value().status, TrialStatus::kComplete);
  EXPECT_EQ(t0.value().tiers.size(), 3u);
  auto t1 = store->get_trial("j", 1);
  ASSERT_TRUE(t1.ok());
  EXPECT_EQ(t1.value().status, TrialStatus::kRunning);
  EXPECT_TRUE(t1.value().tiers.empty());
  EXPECT_EQ(store->fail_running_trials("daemon restarted").value(), 1);
  EXPECT_EQ(store->count_trials("j", TrialStatus::kComplete), 1);
}

// ---- queries ----

class TrialQueryTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    store_ = open();
    ASSERT_TRUE(store_->insert_job(make_job("j", 1)).ok());
    ASSERT_TRUE(store_->insert_job(make_job("other", 2)).ok());
    //        number score  acc    c1   c8   cinf
    add_complete(0, 80.0, 100.0, {3.0, 6.0, 9.0});
    add_complete(1, 95.0, 98.5, {1.0, 5.0, 8.0});
    add_failed(2, "out of memory");
    add_complete(3, 88.0, 99.5, {2.0, 4.0, 10.0});
    add_complete(4, 0.0, 96.0, {0.5, 7.0, 7.0});
    ASSERT_TRUE(store_->insert_trial(running_trial("j", 5)).ok());
    add_failed(6, "timeout");
    ASSERT_TRUE(store_->insert_trial(running_trial("other", 0)).ok());
    ASSERT_TRUE(store_->finish_trial(complete_trial("other", 0, 99, 100, {0.1, 0.1, 0.1})).ok());
  }
  void TearDown() override {
    store_.reset();
    StoreTest::TearDown();
  }
  void add_complete(int64_t n, double score, double acc, std::array<double, 3> d) {
    ASSERT_TRUE(store_->insert_trial(running_trial("j", n)).ok());
    ASSERT_TRUE(store_->finish_trial(complete_trial("j", n, score, acc, d)).ok());
  }
  void add_failed(int64_t n, const std::string& why) {
    ASSERT_TRUE(store_->insert_trial(running_trial("j", n)).ok());
    ASSERT_TRUE(store_->finish_trial(failed_trial("j", n, why)).ok());
  }
  std::vector<int64_t> order(const std::string& by, std::optional<TrialStatus> status = std::nullopt) {
    TrialQuery q;
    q.job_id = "j";
    q.order_by = by;
    q.status = status;
    q.limit = 0;
    auto r = store_->find_trials(q);
    EXPECT_TRUE(r.ok()) << r.status().message;
    return r.ok() ? numbers(r.value()) : std::vector<int64_t>{};
  }
  std::unique_ptr<Store> store_;
};

TEST_F(TrialQueryTest, OrdersByEveryKeyWithTrialsWithoutMetricsLast) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(order("number"), (V{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(order(""), (V{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(order("-number"), (V{6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(order("-score"), (V{1, 3, 0, 4, 2, 5, 6}));
  EXPECT_EQ(order("score"), (V{4, 0, 3, 1, 2, 5, 6}));
  EXPECT_EQ(order("c1"), (V{4, 1, 3, 0, 2, 5, 6}));
  EXPECT_EQ(order("c8"), (V{3, 1, 0, 4, 2, 5, 6}));
  EXPECT_EQ(order("-cinf"), (V{3, 0, 1, 4, 2, 5, 6}));
  EXPECT_EQ(order("-accuracy"), (V{0, 3, 1, 4, 2, 5, 6}));
  EXPECT_EQ(order("accuracy"), (V{4, 1, 3, 0, 2, 5, 6}));
}

TEST_F(TrialQueryTest, FiltersByStatus) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(order("number", TrialStatus::kFailed), (V{2, 6}));
  EXPECT_EQ(order("-score", TrialStatus::kComplete), (V{1, 3, 0, 4}));
  EXPECT_EQ(order("number", TrialStatus::kRunning), (V{5}));
  EXPECT_EQ(order("number", TrialStatus::kCancelled), V{});
  EXPECT_EQ(store_->count_trials("j", std::nullopt), 7);
  EXPECT_EQ(store_->count_trials("j", TrialStatus::kComplete), 4);
  EXPECT_EQ(store_->count_trials("j", TrialStatus::kFailed), 2);
  EXPECT_EQ(store_->count_trials("nope", std::nullopt), 0);

  TrialQuery q;
  q.job_id = "j";
  q.status = TrialStatus::kFailed;
  auto failed = store_->list_trials(q);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[0].error, "out of memory");
  EXPECT_EQ(failed[1].error, "timeout");
}

TEST_F(TrialQueryTest, PagesCoverEveryTrialOnce) {
  for (const std::string by : {"number", "-score", "c8", "accuracy"}) {
    std::vector<int64_t> all = order(by);
    std::vector<int64_t> paged;
    for (int offset = 0;; offset += 3) {
      TrialQuery q;
      q.job_id = "j";
      q.order_by = by;
      q.limit = 3;
      q.offset = offset;
      auto page = store_->list_trials(q);
      EXPECT_LE(page.size(), 3u);
      if (page.empty()) break;
      for (auto n : numbers(page)) paged.push_back(n);
    }
    EXPECT_EQ(paged, all) << by;
  }
  TrialQuery q;
  q.job_id = "j";
  EXPECT_EQ(q.limit, 50);
  EXPECT_EQ(store_->list_trials(q).size(), 7u);
}

TEST_F(TrialQueryTest, ListedTrialsCarryAllFields) {
  TrialQuery q;
  q.job_id = "j";
  q.order_by = "-score";
  q.limit = 1;
  auto best = store_->list_trials(q);
  ASSERT_EQ(best.size(), 1u);
  const TrialRecord want = complete_trial("j", 1, 95.0, 98.5, {1.0, 5.0, 8.0});
  const TrialRecord& got = best[0];
  EXPECT_EQ(got.job_id, "j");
  EXPECT_EQ(got.params, want.params);
  EXPECT_DOUBLE_EQ(got.relative_accuracy, 98.5);
  EXPECT_EQ(got.accuracy_metric, "task");
  EXPECT_DOUBLE_EQ(got.gate, 0.96);
  EXPECT_EQ(got.log_tail, want.log_tail);
  EXPECT_EQ(got.engine_build, want.engine_build);
  EXPECT_EQ(got.device, want.device);
  EXPECT_EQ(got.peak_memory_bytes, want.peak_memory_bytes);
  EXPECT_EQ(got.suggestion_json, want.suggestion_json);
  EXPECT_EQ(got.result_json, want.result_json);
  EXPECT_EQ(got.started_ms, want.started_ms);
  EXPECT_EQ(got.finished_ms, want.finished_ms);
  ASSERT_EQ(got.tiers.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got.tiers[i].tier, want.tiers[i].tier);
    EXPECT_EQ(got.tiers[i].concurrency, want.tiers[i].concurrency);
    EXPECT_DOUBLE_EQ(got.tiers[i].duration_s, want.tiers[i].duration_s);
    EXPECT_DOUBLE_EQ(got.tiers[i].ttft_p99_ms, want.tiers[i].ttft_p99_ms);
    EXPECT_DOUBLE_EQ(got.tiers[i].tpot_p50_ms, want.tiers[i].tpot_p50_ms);
    EXPECT_DOUBLE_EQ(got.tiers[i].output_tokens_per_s, want.tiers[i].output_tokens_per_s);
  }
}

TEST_F(TrialQueryTest, InvalidQueriesNameTheField) {
  TrialQuery q;
  q.job_id = "j";
  q.order_by = "speed";
  auto r = store_->find_trials(q);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code, Code::kInvalidArgument);
  EXPECT_NE(r.status().message.find("order_by"), std::string::npos);
  EXPECT_NE(r.status().message.find("cinf"), std::string::npos);
  EXPECT_TRUE(store_->list_trials(q).empty());
  q.order_by = "-";
  EXPECT_TRUE(Store::check_query(q).ok());   // "-" alone: number, descending
  q.order_by = "c1";
  q.offset = -1;
  EXPECT_NE(Store::check_query(q).message.find("offset"), std::string::npos);
}

TEST_F(TrialQueryTest, NextNumberAndWarmStartTrials) {
  EXPECT_EQ(store_->next_trial_number("j"), 7);
  ASSERT_TRUE(store_->insert_job(make_job("fresh", 3)).ok());
  EXPECT_EQ(store_->next_trial_number("fresh"), 0);
  ASSERT_TRUE(store_->insert_job(make_job("gpu", 4, "synthetic:tiny/cuda")).ok());

  // COMPLETE trials of the other jobs on the same device key, oldest job first.
  auto prior = store_->trials_for_device_key("synthetic:tiny/cpu", "fresh");
  std::vector<std::pair<std::string, int64_t>> got;
  for (const auto& t : prior) got.emplace_back(t.job_id, t.number);
  EXPECT_EQ(got, (std::vector<std::pair<std::string, int64_t>>{{"j", 0}, {"j", 1}, {"j", 3}, {"j", 4}, {"other", 0}}));
  EXPECT_EQ(prior[0].tiers.size(), 3u);
  EXPECT_EQ(store_->trials_for_device_key("synthetic:tiny/cpu", "j").size(), 1u);
  EXPECT_TRUE(store_->trials_for_device_key("synthetic:tiny/cuda", "").empty());
}

// ---- submissions ----

SubmissionRecord make_submission(const std::string& job, int64_t trial, const std::string& day, int64_t ms) {
  SubmissionRecord s;
  s.job_id = job;
  s.trial = trial;
  s.budget_day = day;
  s.submitted_ms = ms;
  s.result = {95.0, 90.0, 85.0, 98.7, 0.96, 86.4};
  s.note = "note " + std::to_string(ms);
  return s;
}

TEST_F(TrialQueryTest, SubmissionsByDayAndJob) {
  ASSERT_TRUE(store_->insert_submission(make_submission("j", 1, "2026-12-01", 10)).ok());
  ASSERT_TRUE(store_->insert_submission(make_submission("j", 3, "2026-12-02", 30)).ok());
  ASSERT_TRUE(store_->insert_submission(make_submission("other", 0, "2026-12-02", 20)).ok());

  EXPECT_EQ(store_->count_submissions_on_day("2026-12-01"), 1);
  EXPECT_EQ(store_->count_submissions_on_day("2026-12-02"), 2);   // every job counts against one budget
  EXPECT_EQ(store_->count_submissions_on_day("2026-12-03"), 0);

  auto all = store_->list_submissions("");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].submitted_ms, 10);   // in time order
  EXPECT_EQ(all[1].job_id, "other");
  EXPECT_EQ(all[2].trial, 3);
  auto mine = store_->list_submissions("j");
  ASSERT_EQ(mine.size(), 2u);
  const SubmissionRecord& s = mine[1];
  EXPECT_GT(s.id, mine[0].id);
  EXPECT_EQ(s.budget_day, "2026-12-02");
  EXPECT_EQ(s.status, "recorded");
  EXPECT_DOUBLE_EQ(s.result.s1, 95.0);
  EXPECT_DOUBLE_EQ(s.result.s8, 90.0);
  EXPECT_DOUBLE_EQ(s.result.sinf, 85.0);
  EXPECT_DOUBLE_EQ(s.result.relative_accuracy, 98.7);
  EXPECT_DOUBLE_EQ(s.result.c, 0.96);
  EXPECT_DOUBLE_EQ(s.result.final_score, 86.4);
  EXPECT_EQ(s.note, "note 30");

  auto missing = store_->insert_submission(make_submission("j", 99, "2026-12-02", 40));
  EXPECT_EQ(missing.status().code, Code::kNotFound) << missing.status().message;
  auto no_day = store_->insert_submission(make_submission("j", 1, "", 40));
  EXPECT_EQ(no_day.status().code, Code::kInvalidArgument);
  EXPECT_EQ(store_->count_submissions_on_day("2026-12-02"), 2);
}

TEST_F(TrialQueryTest, BudgetedInsertStopsAtTheDailyLimit) {
  for (int i = 0; i < 3; ++i) {
    auto r = store_->insert_submission_within_budget(make_submission("j", 1, "2026-12-02", i), 3);
    ASSERT_TRUE(r.ok()) << r.status().message;
  }
  auto over = store_->insert_submission_within_budget(make_submission("j", 1, "2026-12-02", 9), 3);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code, Code::kResourceExhausted);
  EXPECT_NE(over.status().message.find("2026-12-02"), std::string::npos);
  EXPECT_EQ(store_->count_submissions_on_day("2026-12-02"), 3);
  EXPECT_TRUE(store_->insert_submission_within_budget(make_submission("j", 1, "2026-12-03", 10), 3).ok());
}

// ---- persistence and concurrency ----

TEST_F(StoreTest, EverythingSurvivesReopen) {
  {
    auto store = open();
    ASSERT_TRUE(store->insert_job(make_job("j", 5)).ok());
    ASSERT_TRUE(store->insert_trial(running_trial("j", 0)).ok());
    ASSERT_TRUE(store->finish_trial(complete_trial("j", 0, 77.25, 99.25, {1.5, 2.5, 3.5})).ok());
    ASSERT_TRUE(store->insert_submission(make_submission("j", 0, "2026-12-02", 7)).ok());
  }
  auto store = open();
  auto job = store->get_job("j");
  ASSERT_TRUE(job.ok());
  const JobRecord want = make_job("j", 5);
  EXPECT_EQ(job.value().name, want.name);
  EXPECT_EQ(job.value().spec_yaml, want.spec_yaml);
  EXPECT_EQ(job.value().model, want.model);
  EXPECT_EQ(job.value().device_key, want.device_key);
  EXPECT_EQ(job.value().strategy, want.strategy);
  EXPECT_EQ(job.value().trial_budget, want.trial_budget);
  EXPECT_EQ(job.value().state, want.state);
  EXPECT_EQ(job.value().started_ms, want.started_ms);
  auto t = store->get_trial("j", 0);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t.value().score, 77.25);
  EXPECT_DOUBLE_EQ(t.value().tiers[2].duration_s, 3.5);
  EXPECT_EQ(store->list_submissions("j").size(), 1u);
  EXPECT_EQ(store->count_submissions_on_day("2026-12-02"), 1);
}

TEST_F(StoreTest, ReadersNeverSeeHalfWrittenTrialsWhileAWriterRuns) {
  auto store = open();
  ASSERT_TRUE(store->insert_job(make_job("j", 1)).ok());
  constexpr int kTrials = 60;
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::string reader_error;

  std::thread reader([&] {
    int last = 0;
    // Keeps reading until the writer is done, and at least once more after, so the final state is checked.
    for (bool final_pass = false; !final_pass;) {
      final_pass = done.load();
      TrialQuery q;
      q.job_id = "j";
      q.status = TrialStatus::kComplete;
      q.limit = 0;
      auto r = store->find_trials(q);
      if (!r.ok()) {
        reader_error = r.status().message;
        return;
      }
      const int n = static_cast<int>(r.value().size());
      if (n < last) {
        reader_error = "complete trials went from " + std::to_string(last) + " to " + std::to_string(n);
        return;
      }
      last = n;
      for (const auto& t : r.value()) {
        if (t.tiers.size() != 3) {
          reader_error = "trial " + std::to_string(t.number) + " COMPLETE with " + std::to_string(t.tiers.size()) +
                         " tiers";
          return;
        }
      }
      reads.fetch_add(1);
    }
    if (last != kTrials) reader_error = "final read saw " + std::to_string(last) + " trials";
  });

  std::thread writer([&] {
    for (int n = 0; n < kTrials; ++n) {
      ASSERT_TRUE(store->insert_trial(running_trial("j", n)).ok());
      ASSERT_TRUE(store->finish_trial(complete_trial("j", n, n, 99.5, {1.0 + n, 2.0, 3.0})).ok());
    }
  });
  writer.join();
  done.store(true);
  reader.join();
  EXPECT_EQ(reader_error, "");
  EXPECT_GE(reads.load(), 1);
  EXPECT_EQ(store->count_trials("j", TrialStatus::kComplete), kTrials);
}

TEST_F(StoreTest, TwoWritersFromTwoThreadsBothLand) {
  auto store = open();
  ASSERT_TRUE(store->insert_job(make_job("a", 1)).ok());
  ASSERT_TRUE(store->insert_job(make_job("b", 2)).ok());
  auto write = [&](const std::string& job) {
    for (int n = 0; n < 40; ++n) {
      ASSERT_TRUE(store->insert_trial(running_trial(job, n)).ok());
      ASSERT_TRUE(store->finish_trial(complete_trial(job, n, n, 99.5, {1, 2, 3})).ok());
    }
  };
  std::thread ta(write, "a"), tb(write, "b");
  ta.join();
  tb.join();
  EXPECT_EQ(store->count_trials("a", TrialStatus::kComplete), 40);
  EXPECT_EQ(store->count_trials("b", TrialStatus::kComplete), 40);
  EXPECT_EQ(raw_scalar("SELECT COUNT(*) FROM trial_tiers"), "240");
}

// What the daemon's kept snapshots of a job are keyed by: every trial write of the job (and a write across
// jobs) changes the job's revision once it has ended; reads and other jobs' writes do not.
TEST_F(StoreTest, TrialsRevisionChangesWithEveryTrialWriteOfTheJob) {
  auto store = open();
  ASSERT_TRUE(store->insert_job(make_job("j", 1)).ok());
  ASSERT_TRUE(store->insert_job(make_job("k", 2)).ok());
  uint64_t r = store->trials_revision("j");
  ASSERT_TRUE(store->insert_trial(running_trial("j", 0)).ok());
  EXPECT_NE(store->trials_revision("j"), r);
  r = store->trials_revision("j");
  TrialQuery q;
  q.job_id = "j";
  store->list_trials(q);
  store->get_trial("j", 0);
  EXPECT_EQ(store->trials_revision("j"), r) << "a read changed the revision";
  ASSERT_TRUE(store->insert_trial(running_trial("k", 0)).ok());
  EXPECT_EQ(store->trials_revision("j"), r) << "another job's write changed the revision";
  TrialRecord done = running_trial("j", 0);
  done.status = TrialStatus::kFailed;
  ASSERT_TRUE(store->finish_trial(done).ok());
  EXPECT_NE(store->trials_revision("j"), r);
  r = store->trials_revision("j");
  const uint64_t rk = store->trials_revision("k");
  ASSERT_TRUE(store->fail_running_trials("restart").ok());
  EXPECT_NE(store->trials_revision("j"), r);
  EXPECT_NE(store->trials_revision("k"), rk);
}

}  // namespace
}  // namespace soartune::daemon
