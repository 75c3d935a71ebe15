// The scored snapshots of jobs no runner holds: kept per store revision, so reading a finished job again costs
// nothing until one of its trials changes, and a change is always seen.
#include "daemon/scored_snapshots.h"

#include <gtest/gtest.h>

#include "daemon/job_manager.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::TempDir;

TEST(ScoredSnapshots, KeptPerRevisionAndBounded) {
  ScoredSnapshots kept(2);
  auto a = std::make_shared<const ScoredTrials>();
  auto b = std::make_shared<const ScoredTrials>();
  EXPECT_EQ(kept.find("a", 1), nullptr);
  kept.put("a", 1, a);
  EXPECT_EQ(kept.find("a", 1), a);
  EXPECT_EQ(kept.find("a", 2), nullptr) << "a snapshot of another revision was served";
  kept.put("a", 3, b);
  EXPECT_EQ(kept.find("a", 3), b);
  kept.put("a", 2, a);   // a slower reader of an older revision does not replace the newer one
  EXPECT_EQ(kept.find("a", 3), b);
  kept.put("b", 1, a);
  kept.find("a", 3);     // a read most recently: c pushes b out, not a
  kept.put("c", 1, a);
  EXPECT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.find("b", 1), nullptr);
  EXPECT_EQ(kept.find("a", 3), b);
  kept.erase("a");
  EXPECT_EQ(kept.find("a", 3), nullptr);
}

TrialRecord finished(const std::string& job, int64_t n, double c1) {
  TrialRecord t;
  t.job_id = job;
  t.number = n;
  t.status = TrialStatus::kComplete;
  t.params = {{"max_running_requests", std::to_string(n + 1)}};
  t.tiers = {{"c1", 1, c1}, {"c8", 8, 1.0}, {"cinf", 0, 1.0}};
  t.relative_accuracy = 100;
  t.started_ms = 1000 * n;
  t.finished_ms = 1000 * n + 10;
  return t;
}

TEST(ScoredSnapshots, AFinishedJobIsScoredOncePerChange) {
  TempDir dir;
  DaemonConfig cfg;
  cfg.database = dir.file("db.sqlite");
  cfg.work_dir = dir.file("work");
  auto store = Store::open(cfg.database);
  ASSERT_TRUE(store.ok());
  JobRecord job;
  job.id = "done";
  job.name = "done";
  job.spec_yaml = "model: synthetic:tiny\nbudget: {trials: 10}\n";
  job.model = "synthetic:tiny";
  job.strategy = "random";
  job.trial_budget = 10;
  job.state = JobState::kSucceeded;
  ASSERT_TRUE(store.value()->insert_job(job).ok());
  for (int64_t n = 0; n < 5; ++n) {
    TrialRecord t = finished("done", n, 2.0 - 0.1 * static_cast<double>(n));
    ASSERT_TRUE(store.value()->insert_trial(t).ok());
    ASSERT_TRUE(store.value()->finish_trial(t).ok());
  }
  JobManager jobs(cfg, std::move(store).value());
  ASSERT_TRUE(jobs.start().ok());

  const ScoredTrials* first = nullptr;
  ASSERT_TRUE(jobs.read_trials("done", [&](const ScoredTrials& ts) { first = &ts; }).ok());
  const ScoredTrials* again = nullptr;
  ASSERT_TRUE(jobs.read_trials("done", [&](const ScoredTrials& ts) { again = &ts; }).ok());
  EXPECT_EQ(first, again) << "the unchanged job was read and scored again";
  auto best = jobs.best("done");
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best.value().number, 4);

  // A faster trial written to the store: the next read sees it, scored against the new best duration.
  TrialRecord faster = finished("done", 5, 0.5);
  ASSERT_TRUE(jobs.with_store([&](Store& s) { return s.insert_trial(faster); }).ok());
  ASSERT_TRUE(jobs.with_store([&](Store& s) { return s.finish_trial(faster); }).ok());
  size_t n = 0;
  double old_best_score = 0;
  ASSERT_TRUE(jobs.read_trials("done", [&](const ScoredTrials& ts) {
    n = ts.all().size();
    old_best_score = ts.find(4)->score;
  }).ok());
  EXPECT_EQ(n, 6u);
  EXPECT_EQ(jobs.best("done").value().number, 5);
  auto fresh = jobs.trials("done");
  ASSERT_TRUE(fresh.ok());
  EXPECT_DOUBLE_EQ(fresh.value()[4].score, old_best_score);
  EXPECT_LT(old_best_score, jobs.best("done").value().score);
  EXPECT_EQ(jobs.read_trials("no-such-job", [](const ScoredTrials&) {}).code, Code::kNotFound);
  jobs.shutdown();
}

}  // namespace
}  // namespace soartune::daemon
