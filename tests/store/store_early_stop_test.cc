// PRUNED trials in the store (schema v8): the status and the early-stop facts round-trip; a database from before
// v8 keeps every row (trials, their tiers, plans, environment and the submissions that refer to them) when the
// status constraint is widened, still refuses a status it does not know, and passes SQLite's integrity check.
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "daemon/store.h"
#include "daemon/store_sqlite.h"
#include "store_db_dir.h"

namespace soartune::daemon {
namespace {

namespace fs = std::filesystem;

class StoreEarlyStopTest : public testing::StoreDbDir {};

TrialRecord pruned(const std::string& job_id, int64_t n) {
  TrialRecord t;
  t.job_id = job_id;
  t.number = n;
  t.status = TrialStatus::kPruned;
  t.params = {{"weight_bits", "4"}};
  t.relative_accuracy = 61.5;
  t.accuracy_metric = "fidelity";
  t.tiers = {{"c1", 1, 2.5}};
  t.error = "stopped early after c1";
  t.early_stop = EarlyStopFacts{"c1", 41.25, 88.5, 0.05};
  return t;
}

TEST_F(StoreEarlyStopTest, PrunedTrialsRoundTripWithTheirFacts) {
  auto opened = Store::open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status().message;
  Store& s = *opened.value();
  JobRecord j;
  j.id = "a";
  j.state = JobState::kRunning;
  ASSERT_TRUE(s.insert_job(j).ok());
  TrialRecord t = pruned("a", 1);
  TrialRecord running = t;
  running.status = TrialStatus::kRunning;
  ASSERT_TRUE(s.insert_trial(running).ok());
  ASSERT_TRUE(s.finish_trial(t).ok());
  const TrialRecord back = s.get_trial("a", 1).value();
  EXPECT_EQ(back.status, TrialStatus::kPruned);
  ASSERT_TRUE(back.early_stop);
  EXPECT_EQ(back.early_stop->stage, "c1");
  EXPECT_DOUBLE_EQ(back.early_stop->bound, 41.25);
  EXPECT_DOUBLE_EQ(back.early_stop->incumbent, 88.5);
  EXPECT_DOUBLE_EQ(back.early_stop->margin, 0.05);
  ASSERT_EQ(back.tiers.size(), 1u);
  EXPECT_DOUBLE_EQ(back.relative_accuracy, 61.5);
  EXPECT_EQ(s.count_trials("a", TrialStatus::kPruned), 1);
  EXPECT_EQ(trial_status_from_string("pruned"), TrialStatus::kPruned);
  // A trial that was not stopped early has no facts.
  TrialRecord other = running;
  other.number = 2;
  ASSERT_TRUE(s.insert_trial(other).ok());
  other.status = TrialStatus::kFailed;
  other.early_stop.reset();
  ASSERT_TRUE(s.finish_trial(other).ok());
  EXPECT_FALSE(s.get_trial("a", 2).value().early_stop);
  // Rankings put it after every COMPLETE trial.
  TrialQuery q;
  q.job_id = "a";
  q.order_by = "c1";
  EXPECT_EQ(s.find_trials(q).value().front().status, TrialStatus::kPruned);   // the only trial with a c1
}

TEST_F(StoreEarlyStopTest, AVersion7DatabaseKeepsEveryRowAndTakesPrunedTrials) {
  {
    auto c = sql::Connection::open(path_);
    ASSERT_TRUE(c.ok());
    ASSERT_NO_FATAL_FAILURE(migrate_to(c.value(), 7));
    ASSERT_TRUE(c.value().exec(
        "INSERT INTO jobs (id, state) VALUES ('old', 'SUCCEEDED');"
        "INSERT INTO trials (job_id, number, status, score) VALUES ('old', 0, 'COMPLETE', 91.5), ('old', 1, 'FAILED', 0);"
        "INSERT INTO trial_tiers (job_id, number, tier, position, duration_s) VALUES ('old', 0, 'c1', 0, 1.5),"
        "  ('old', 0, 'c8', 1, 2.5), ('old', 0, 'cinf', 2, 3.5);"
        "INSERT INTO trial_plans (job_id, number, position, op) VALUES ('old', 0, 0, 'gemv');"
        "INSERT INTO trial_env (job_id, number, name, value) VALUES ('old', 0, 'OMP_NUM_THREADS', '2');"
        "INSERT INTO submissions (job_id, trial, submitted_ms, budget_day) VALUES ('old', 0, 1, '2026-12-05');").ok());
    EXPECT_FALSE(c.value().exec("INSERT INTO trials (job_id, number, status) VALUES ('old', 9, 'PRUNED')").ok())
        << "version 7 does not know PRUNED";
  }
  auto opened = Store::open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status().message;
  Store& s = *opened.value();
  EXPECT_EQ(s.schema_version(), sql::latest_schema_version());
  const TrialRecord t0 = s.get_trial("old", 0).value();
  EXPECT_EQ(t0.status, TrialStatus::kComplete);
  EXPECT_DOUBLE_EQ(t0.score, 91.5);
  EXPECT_EQ(t0.tiers.size(), 3u);
  EXPECT_EQ(t0.plans.size(), 1u);
  EXPECT_EQ(t0.env.at("OMP_NUM_THREADS"), "2");
  EXPECT_FALSE(t0.early_stop);
  EXPECT_EQ(s.get_trial("old", 1).value().status, TrialStatus::kFailed);
  EXPECT_EQ(s.list_submissions("old").size(), 1u);
  // The widened constraint takes PRUNED and still refuses what it does not know.
  TrialRecord p = pruned("old", 2);
  TrialRecord running = p;
  running.status = TrialStatus::kRunning;
  ASSERT_TRUE(s.insert_trial(running).ok());
  ASSERT_TRUE(s.finish_trial(p).ok());
  EXPECT_EQ(s.get_trial("old", 2).value().status, TrialStatus::kPruned);
  {
    auto c = sql::Connection::open(path_);
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE(c.value().exec("INSERT INTO trials (job_id, number, status) VALUES ('old', 9, 'LOST')").ok());
  }
  EXPECT_EQ(scalar("PRAGMA integrity_check"), "ok");
  EXPECT_NE(scalar("SELECT sql FROM sqlite_master WHERE name = 'trials'").find("'PRUNED'"), std::string::npos);
}

}  // namespace
}  // namespace soartune::daemon
