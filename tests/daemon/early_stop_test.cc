// Early stop in the runner: the job spec's early_stop section (errors name the field and the allowed values),
// the decision the runner takes on a progress line against the job's trials, and the stdout line reader that
// feeds it (bounded whatever the worker prints).
#include "daemon/early_stop.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/early_stop_spec.h"
#include "daemon/job_spec.h"
#include "daemon/output_lines.h"

namespace soartune::daemon {
namespace {

std::string error_of(const std::string& yaml) {
  Result<std::optional<search::EarlyStopRule>> r = parse_early_stop(YAML::Load(yaml)["early_stop"]);
  return r.ok() ? "" : r.status().message;
}

TEST(EarlyStopSpec, OffWhenAbsentMeasuredRuleByDefault) {
  Result<std::optional<search::EarlyStopRule>> absent = parse_early_stop(YAML::Load("a: 1")["early_stop"]);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent.value());
  Result<std::optional<search::EarlyStopRule>> d = parse_early_stop(YAML::Load("early_stop: {}")["early_stop"]);
  ASSERT_TRUE(d.ok() && d.value());
  EXPECT_EQ(d.value()->after_tiers, 1);
  EXPECT_DOUBLE_EQ(d.value()->margin, 0.05);
  Result<std::optional<search::EarlyStopRule>> r =
      parse_early_stop(YAML::Load("early_stop: {after_tiers: 0, margin_pct: 12.5}")["early_stop"]);
  ASSERT_TRUE(r.ok() && r.value());
  EXPECT_EQ(r.value()->after_tiers, 0);
  EXPECT_DOUBLE_EQ(r.value()->margin, 0.125);
}

TEST(EarlyStopSpec, ErrorsNameTheFieldAndTheAllowedValues) {
  EXPECT_EQ(error_of("early_stop: 3"), "early_stop: must be a mapping {after_tiers, margin_pct}");
  EXPECT_EQ(error_of("early_stop: {after: 1}"), "early_stop.after: unknown key; allowed: after_tiers, margin_pct");
  const std::string after = "early_stop.after_tiers: must be an integer in 0..2 (the tiers measured before deciding; "
                            "0: right after the accuracy)";
  EXPECT_EQ(error_of("early_stop: {after_tiers: 3}"), after + ", got 3");
  EXPECT_EQ(error_of("early_stop: {after_tiers: -1}"), after + ", got -1");
  EXPECT_EQ(error_of("early_stop: {after_tiers: one}"), after + ", got 'one'");
  EXPECT_EQ(error_of("early_stop: {after_tiers: [1]}"), after);
  const std::string margin = "early_stop.margin_pct: must be a number in 0..100 (percent under the incumbent)";
  EXPECT_EQ(error_of("early_stop: {margin_pct: 101}"), margin + ", got 101");
  EXPECT_EQ(error_of("early_stop: {margin_pct: -0.5}"), margin + ", got -0.5");
  EXPECT_EQ(error_of("early_stop: {margin_pct: .nan}"), margin + ", got .nan");
  EXPECT_EQ(error_of("early_stop: {margin_pct: lots}"), margin + ", got 'lots'");
}

TEST(EarlyStopSpec, ReachesTheJobSpec) {
  const std::string job = R"(model: synthetic:tiny
workload: {name: w, requests: [{name: a, input_len: 8, output_len: 8, count: 2}]}
accuracy: {set: synthetic, samples: 4}
space: {weight_bits: {type: choice, values: [16, 4]}}
)";
  Result<JobSpec> off = parse_job_spec(job, SpecContext{});
  ASSERT_TRUE(off.ok()) << off.status().message;
  EXPECT_FALSE(off.value().early_stop);
  Result<JobSpec> on = parse_job_spec(job + "early_stop: {after_tiers: 1, margin_pct: 5}\n", SpecContext{});
  ASSERT_TRUE(on.ok()) << on.status().message;
  ASSERT_TRUE(on.value().early_stop);
  EXPECT_EQ(on.value().early_stop->after_tiers, 1);
  Result<JobSpec> bad = parse_job_spec(job + "early_stop: {margin_pct: 200}\n", SpecContext{});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message.rfind("early_stop.margin_pct: must be a number in 0..100", 0), 0u) << bad.status().message;
}

TrialRecord complete(int64_t n, double c1, double c8, double cinf, double acc, bool reference = false) {
  TrialRecord t;
  t.job_id = "j";
  t.number = n;
  t.status = TrialStatus::kComplete;
  t.is_reference = reference;
  t.tiers = {{"c1", 1, c1}, {"c8", 8, c8}, {"cinf", 0, cinf}};
  t.relative_accuracy = acc;
  return t;
}

WorkerProgress progress(double acc, std::vector<double> tiers) {
  WorkerProgress p;
  p.accuracy.relative_pct = acc;
  const char* names[] = {"c1", "c8", "cinf"};
  for (size_t i = 0; i < tiers.size(); ++i) {
    TierMeasurement m;
    m.tier = names[i];
    m.duration_s = tiers[i];
    p.tiers.push_back(m);
  }
  p.stage = tiers.empty() ? "accuracy" : names[tiers.size() - 1];
  return p;
}

TEST(EarlyStopDecision, NoIncumbentNoDecision) {
  const search::ScoringSpec scoring;
  ScoredTrials trials(scoring);
  const search::EarlyStopRule rule{0, 0.05};
  EXPECT_FALSE(early_stop_verdict(rule, scoring, progress(10, {}), trials));   // even with C = 0
}

TEST(EarlyStopDecision, GateFailedStopsAfterTheAccuracyWhenAskedTo) {
  const search::ScoringSpec scoring;   // the race's gate: below 97% C = 0
  ScoredTrials trials(scoring);
  trials.put(complete(0, 1, 2, 3, 100, true));
  const TrialRecord* best = trials.best();
  ASSERT_TRUE(best);
  std::optional<EarlyStopFacts> v = early_stop_verdict({0, 0.05}, scoring, progress(50, {}), trials);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->stage, "accuracy");
  EXPECT_DOUBLE_EQ(v->bound, 0);
  EXPECT_DOUBLE_EQ(v->incumbent, best->score);
  EXPECT_DOUBLE_EQ(v->margin, 0.05);
  // after_tiers 1: the same trial runs on until its first tier is measured.
  EXPECT_FALSE(early_stop_verdict({1, 0.05}, scoring, progress(50, {}), trials));
  std::optional<EarlyStopFacts> later = early_stop_verdict({1, 0.05}, scoring, progress(50, {0.5}), trials);
  ASSERT_TRUE(later);
  EXPECT_EQ(later->stage, "c1");
  // Within the gate it can still win: no stop at the accuracy.
  EXPECT_FALSE(early_stop_verdict({0, 0.05}, scoring, progress(99.5, {}), trials));
}

TEST(EarlyStopDecision, SlowFirstTierAgainstTheIncumbent) {
  const search::ScoringSpec scoring;
  ScoredTrials trials(scoring);
  trials.put(complete(0, 1, 1, 1, 100, true));
  trials.put(complete(1, 0.5, 0.5, 0.5, 100));   // the incumbent: the best on every tier
  ASSERT_EQ(trials.best()->number, 1);
  const double incumbent = trials.best()->score;
  const search::EarlyStopRule rule{1, 0.05};
  // c1 twice as slow as the best: its c1 score is 50, so the bound is under the incumbent by far more than 5%.
  std::optional<EarlyStopFacts> v = early_stop_verdict(rule, scoring, progress(100, {1.0}), trials);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->stage, "c1");
  EXPECT_DOUBLE_EQ(v->incumbent, incumbent);
  std::array<std::optional<double>, search::kTiers> measured;
  measured[0] = 1.0;
  EXPECT_DOUBLE_EQ(v->bound, search::score_upper_bound(scoring, 100, measured, trials.reference_durations()));
  EXPECT_LT(v->bound, incumbent * 0.95);
  // As fast as the best on c1: the bound is the incumbent's, so it runs on.
  EXPECT_FALSE(early_stop_verdict(rule, scoring, progress(100, {0.5}), trials));
  // Slightly slower: within the margin, runs on; the same with no margin stops it.
  EXPECT_FALSE(early_stop_verdict(rule, scoring, progress(100, {0.51}), trials));
  EXPECT_TRUE(early_stop_verdict({1, 0.0}, scoring, progress(100, {0.51}), trials));
  // Every tier measured: nothing left to save, never stopped.
  EXPECT_FALSE(early_stop_verdict(rule, scoring, progress(100, {5, 5, 5}), trials));
}

TEST(EarlyStopDecision, MeasuredTiersKeepTheRaceTiersInOrder) {
  WorkerProgress p = progress(90, {1.5, 2.5});
  TierMeasurement odd;
  odd.tier = "c4";
  odd.duration_s = 9;
  p.tiers.insert(p.tiers.begin(), odd);
  const std::vector<TierRecord> t = measured_tiers(p);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].tier, "c1");
  EXPECT_DOUBLE_EQ(t[0].duration_s, 1.5);
  EXPECT_EQ(t[1].tier, "c8");
}

TEST(OutputLines, SplitsAcrossChunksAndDropsOverlongLines) {
  std::vector<std::string> got;
  OutputLines lines([&](std::string_view l) { got.emplace_back(l); }, 8);
  const std::string text = "one\ntwo\nthis line is too long\nfour\n\nsix";
  for (char c : text) lines.feed(&c, 1);   // one byte at a time
  EXPECT_EQ(got, (std::vector<std::string>{"one", "two", "four", ""}));   // "six" has no newline yet
  lines.feed("\n", 1);
  EXPECT_EQ(got.back(), "six");
  got.clear();
  const std::string big = std::string(1 << 20, 'x') + "\nok\n";
  lines.feed(big.data(), big.size());
  EXPECT_EQ(got, (std::vector<std::string>{"ok"}));
}

}  // namespace
}  // namespace soartune::daemon
