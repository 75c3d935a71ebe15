// The job's scored state kept in memory: after any sequence of put()s the scores, the best trial and the
// counts are those of scoring every trial from scratch, and a full rescore happens only when a trial moves a
// reference duration.
#include "daemon/scored_trials.h"

#include <random>

#include <gtest/gtest.h>

namespace soartune::daemon {
namespace {

TrialRecord trial(int64_t n, TrialStatus s, double c1 = 0, double c8 = 0, double cinf = 0, double acc = 100) {
  TrialRecord t;
  t.job_id = "j";
  t.number = n;
  t.status = s;
  t.started_ms = 1000 * n;
  t.finished_ms = s == TrialStatus::kRunning ? 0 : 1000 * n + 500;
  if (s == TrialStatus::kComplete) {
    t.tiers = {{"c1", 1, c1}, {"c8", 8, c8}, {"cinf", 0, cinf}};
    t.relative_accuracy = acc;
  }
  return t;
}

TEST(ScoredTrials, IncrementalEqualsFromScratch) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> d(0.5, 2.0), a(96, 100);
  ScoredTrials inc;
  std::vector<TrialRecord> all;
  for (int64_t n = 0; n < 200; ++n) {
    inc.put(trial(n, TrialStatus::kRunning));
    TrialRecord t = n % 7 == 3 ? trial(n, TrialStatus::kFailed) : trial(n, TrialStatus::kComplete, d(rng), d(rng), d(rng), a(rng));
    if (n % 7 == 3) t.failure_kind = n % 2 ? FailureKind::kRestart : FailureKind::kCrash;
    inc.put(t);
    all.push_back(t);
  }
  ScoredTrials scratch;
  scratch.reset(all);
  ASSERT_EQ(inc.all().size(), scratch.all().size());
  for (const auto& [n, t] : scratch.all()) {
    EXPECT_DOUBLE_EQ(inc.find(n)->score, t.score) << n;
    EXPECT_DOUBLE_EQ(inc.find(n)->gate, t.gate) << n;
  }
  ASSERT_TRUE(inc.best());
  EXPECT_EQ(inc.best()->number, scratch.best()->number);
  EXPECT_EQ(inc.done(), scratch.done());
  EXPECT_EQ(inc.failed(), scratch.failed());
  EXPECT_EQ(inc.counted(), scratch.counted());
  EXPECT_EQ(inc.counted(), 200 - 15);   // the 15 restarts (n = 3 + 7k, n odd) do not count
  EXPECT_EQ(inc.running(), 0);
  EXPECT_DOUBLE_EQ(inc.mean_trial_seconds(), 0.5);
  // A new best on a tier is rare after the first few trials: far fewer full passes than trials.
  EXPECT_LT(inc.full_rescores(), 40);
}

TEST(ScoredTrials, ReferenceStateAndCounts) {
  ScoredTrials s;
  TrialRecord ref = trial(0, TrialStatus::kRunning);
  ref.is_reference = true;
  s.put(ref);
  EXPECT_EQ(s.running(), 1);
  EXPECT_FALSE(s.reference_complete());
  ref = trial(0, TrialStatus::kFailed);
  ref.is_reference = true;
  ref.failure_kind = FailureKind::kRestart;
  s.put(ref);
  EXPECT_EQ(s.reference_failed(), nullptr);   // a restart says nothing about the reference
  EXPECT_EQ(s.counted(), 0);
  ref = trial(1, TrialStatus::kComplete, 1, 1, 1);
  ref.is_reference = true;
  EXPECT_DOUBLE_EQ(s.put(ref).score, 100);
  EXPECT_TRUE(s.reference_complete());
  EXPECT_EQ(s.running(), 0);
  EXPECT_EQ(s.done(), 2);
  // Twice as fast everywhere: it becomes the reference duration, it scores 100 and the first one 50.
  EXPECT_DOUBLE_EQ(s.put(trial(2, TrialStatus::kComplete, 0.5, 0.5, 0.5)).score, 100);
  EXPECT_DOUBLE_EQ(s.find(1)->score, 50);
  EXPECT_EQ(s.best()->number, 2);
  // Under every gate: C = 0.
  EXPECT_DOUBLE_EQ(s.put(trial(3, TrialStatus::kComplete, 0.5, 0.5, 0.5, 90)).score, 0);
  EXPECT_EQ(s.best()->number, 2);
}

}  // namespace
}  // namespace soartune::daemon
