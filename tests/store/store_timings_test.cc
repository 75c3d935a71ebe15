// Where each trial's time went, in the store (schema v9): the timings round-trip through finish_trial, and a
// database from before v9 keeps every row (trials, their tiers, plans, environment and the submissions that
// refer to them), reads its trials with all timings 0, and passes SQLite's integrity check.
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

class StoreTimingsTest : public testing::StoreDbDir {};

void expect_no_timings(const TrialTimings& t) {
  EXPECT_EQ(t.load_s, 0);
  EXPECT_EQ(t.weights_s, 0);
  EXPECT_EQ(t.prepare_s, 0);
  EXPECT_EQ(t.quantize_s, 0);
  EXPECT_EQ(t.accuracy_s, 0);
  EXPECT_EQ(t.tiers_s, 0);
}

TEST_F(StoreTimingsTest, TimingsRoundTripThroughFinishTrial) {
  auto opened = Store::open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status().message;
  Store& s = *opened.value();
  JobRecord j;
  j.id = "a";
  j.state = JobState::kRunning;
  ASSERT_TRUE(s.insert_job(j).ok());
  TrialRecord t;
  t.job_id = "a";
  t.number = 0;
  t.status = TrialStatus::kRunning;
  ASSERT_TRUE(s.insert_trial(t).ok());
  expect_no_timings(s.get_trial("a", 0).value().timings);   // running: nothing reported yet

  t.status = TrialStatus::kComplete;
  t.tiers = {{"c1", 1, 2.5}};
  t.timings = TrialTimings{31.25, 2.125, 20.5, 4.0625, 3.375, 10.0625};
  ASSERT_TRUE(s.finish_trial(t).ok());
  const TrialTimings back = s.get_trial("a", 0).value().timings;
  EXPECT_DOUBLE_EQ(back.load_s, 31.25);
  EXPECT_DOUBLE_EQ(back.weights_s, 2.125);
  EXPECT_DOUBLE_EQ(back.prepare_s, 20.5);
  EXPECT_DOUBLE_EQ(back.quantize_s, 4.0625);
  EXPECT_DOUBLE_EQ(back.accuracy_s, 3.375);
  EXPECT_DOUBLE_EQ(back.tiers_s, 10.0625);
  // Listings read them too.
  TrialQuery q;
  q.job_id = "a";
  const auto listed = s.find_trials(q).value();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_DOUBLE_EQ(listed.front().timings.prepare_s, 20.5);
  EXPECT_EQ(scalar("SELECT quantize_s FROM trials WHERE job_id = 'a' AND number = 0"), "4.0625");

  // Finishing again (a re-recorded result) replaces them: a result without timings leaves 0, not the old ones.
  t.timings = TrialTimings{};
  t.status = TrialStatus::kFailed;
  ASSERT_TRUE(s.finish_trial(t).ok());
  expect_no_timings(s.get_trial("a", 0).value().timings);
}

TEST_F(StoreTimingsTest, AVersion8DatabaseKeepsEveryRowWithTimingsZero) {
  {
    auto c = sql::Connection::open(path_);
    ASSERT_TRUE(c.ok());
    ASSERT_NO_FATAL_FAILURE(migrate_to(c.value(), 8));
    ASSERT_TRUE(c.value().exec(
        "INSERT INTO jobs (id, state) VALUES ('old', 'SUCCEEDED');"
        "INSERT INTO trials (job_id, number, status, score, peak_memory_bytes, result_json) VALUES "
        "  ('old', 0, 'COMPLETE', 91.5, 1024, '{\"ok\": true, \"timings_s\": {\"load\": 1.5}}'),"
        "  ('old', 1, 'FAILED', 0, 0, ''), ('old', 2, 'PRUNED', 0, 0, '');"
        "UPDATE trials SET early_stop_stage = 'c1', early_stop_bound = 41.25 WHERE number = 2;"
        "INSERT INTO trial_tiers (job_id, number, tier, position, duration_s) VALUES ('old', 0, 'c1', 0, 1.5),"
        "  ('old', 0, 'c8', 1, 2.5), ('old', 0, 'cinf', 2, 3.5);"
        "INSERT INTO trial_plans (job_id, number, position, op) VALUES ('old', 0, 0, 'gemv');"
        "INSERT INTO trial_env (job_id, number, name, value) VALUES ('old', 0, 'OMP_NUM_THREADS', '2');"
        "INSERT INTO submissions (job_id, trial, submitted_ms, budget_day) VALUES ('old', 0, 1, '2026-12-05');").ok());
    EXPECT_FALSE(c.value().exec("SELECT load_s FROM trials").ok()) << "version 8 has no timings";
  }
  auto opened = Store::open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status().message;
  Store& s = *opened.value();
  EXPECT_EQ(s.schema_version(), 9);
  EXPECT_EQ(s.schema_version(), sql::latest_schema_version());
  EXPECT_EQ(s.count_trials("old", std::nullopt), 3);
  const TrialRecord t0 = s.get_trial("old", 0).value();
  EXPECT_EQ(t0.status, TrialStatus::kComplete);
  EXPECT_DOUBLE_EQ(t0.score, 91.5);
  EXPECT_EQ(t0.peak_memory_bytes, 1024);
  EXPECT_EQ(t0.tiers.size(), 3u);
  EXPECT_EQ(t0.plans.size(), 1u);
  EXPECT_EQ(t0.env.at("OMP_NUM_THREADS"), "2");
  // The migration reads nothing back out of the stored JSON: timings are values only from v9 on.
  expect_no_timings(t0.timings);
  EXPECT_EQ(s.get_trial("old", 1).value().status, TrialStatus::kFailed);
  expect_no_timings(s.get_trial("old", 1).value().timings);
  const TrialRecord t2 = s.get_trial("old", 2).value();
  EXPECT_EQ(t2.status, TrialStatus::kPruned);
  ASSERT_TRUE(t2.early_stop);
  EXPECT_DOUBLE_EQ(t2.early_stop->bound, 41.25);
  expect_no_timings(t2.timings);
  EXPECT_EQ(s.list_submissions("old").size(), 1u);
  EXPECT_EQ(scalar("SELECT COUNT(*) FROM trial_tiers"), "3");
  EXPECT_EQ(scalar("SELECT SUM(load_s + weights_s + prepare_s + quantize_s + accuracy_s + tiers_s) FROM trials"), "0.0");
  EXPECT_EQ(scalar("PRAGMA integrity_check"), "ok");
  // A migrated database takes the new values like a fresh one.
  TrialRecord t3;
  t3.job_id = "old";
  t3.number = 3;
  ASSERT_TRUE(s.insert_trial(t3).ok());
  t3.status = TrialStatus::kComplete;
  t3.timings.load_s = 7.5;
  t3.timings.tiers_s = 2.5;
  ASSERT_TRUE(s.finish_trial(t3).ok());
  EXPECT_DOUBLE_EQ(s.get_trial("old", 3).value().timings.load_s, 7.5);
  EXPECT_DOUBLE_EQ(s.get_trial("old", 3).value().timings.tiers_s, 2.5);
}

}  // namespace
}  // namespace soartune::daemon
