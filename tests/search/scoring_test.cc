#include "search/scoring.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

ScoringSpec parse_ok(const std::string& yaml) {
  Result<ScoringSpec> r = ScoringSpec::parse(YAML::Load(yaml));
  EXPECT_TRUE(r.ok()) << r.status().message;
  return r.ok() ? r.value() : ScoringSpec{};
}

std::string error_of(const std::string& yaml) {
  Result<ScoringSpec> r = ScoringSpec::parse(YAML::Load(yaml));
  if (r.ok()) return "(parsed)";
  EXPECT_EQ(r.status().code, Code::kInvalidArgument);
  return r.status().message;
}

TEST(ScoringTest, RaceGateAtEveryBoundary) {
  const ScoringSpec race;
  const std::vector<std::pair<double, double>> cases = {
      {0.0, 0.0},    {50.0, 0.0},   {96.99, 0.0},  {97.0, 0.0},  {97.0001, 0.92}, {97.5, 0.92}, {98.0, 0.92},
      {98.0001, 0.96}, {98.5, 0.96}, {99.0, 0.96}, {99.0001, 1.0}, {99.01, 1.0},   {100.0, 1.0}, {104.0, 1.0},
      {-3.0, 0.0}};
  for (const auto& [acc, c] : cases) EXPECT_DOUBLE_EQ(race.gate_multiplier(acc), c) << acc;
  EXPECT_EQ(race.gate_multiplier(std::numeric_limits<double>::quiet_NaN()), 0.0);
  EXPECT_EQ(race.gate_multiplier(std::numeric_limits<double>::infinity()), 1.0);   // capped at 100
  EXPECT_EQ(race.gate_levels(), (std::vector<double>{1.0, 0.96, 0.92, 0.0}));
}

TEST(ScoringTest, RaceDefaults) {
  const ScoringSpec d = parse_ok("{}");
  EXPECT_EQ(d.weights, (std::array<double, kTiers>{0.40, 0.30, 0.30}));
  ASSERT_EQ(d.gate.size(), 3u);
  EXPECT_EQ(d.gate[0].above_pct, 99.0);
  EXPECT_EQ(d.gate[2].c, 0.92);
  for (const auto& t : d.target_s) EXPECT_FALSE(t.has_value());
  EXPECT_TRUE(ScoringSpec::parse(YAML::Node()).ok());
}

TEST(ScoringTest, TheFirstWeeksWinner) {
  // soar-race.md: S1 = 100, S8 = 99.99, Sinf = 96.39 at C = 0.92 gave a final of about 91.
  const ScoringSpec race;
  TrialMetrics m;
  m.duration_s = {10.0, 10.0 / 0.9999, 10.0 / 0.9639};
  m.relative_accuracy_pct = 97.6;
  const Score s = score(race, m, {10.0, 10.0, 10.0});
  EXPECT_NEAR(s.tier_score[0], 100.0, 1e-9);
  EXPECT_NEAR(s.tier_score[1], 99.99, 1e-9);
  EXPECT_NEAR(s.tier_score[2], 96.39, 1e-9);
  EXPECT_NEAR(s.speed, 40.0 + 0.3 * 99.99 + 0.3 * 96.39, 1e-9);
  EXPECT_DOUBLE_EQ(s.gate, 0.92);
  EXPECT_NEAR(s.final_score, s.speed * 0.92, 1e-12);
  EXPECT_NEAR(s.final_score, 91.0, 0.5);
}

TEST(ScoringTest, DurationsRelativeToTheBestSeenPerTier) {
  const ScoringSpec race;
  TrialMetrics a, b, c;
  a.duration_s = {2.0, 8.0, 4.0};
  b.duration_s = {4.0, 4.0, 8.0};
  c.duration_s = {std::nan(""), -1.0, 0.0};   // invalid measurements never become the best
  const auto ref = reference_durations(race, {a, b, c});
  EXPECT_EQ(ref, (std::array<double, kTiers>{2.0, 4.0, 4.0}));
  a.relative_accuracy_pct = 100;
  const Score s = score(race, a, ref);
  EXPECT_DOUBLE_EQ(s.tier_score[0], 100.0);
  EXPECT_DOUBLE_EQ(s.tier_score[1], 50.0);
  EXPECT_DOUBLE_EQ(s.tier_score[2], 100.0);
  EXPECT_DOUBLE_EQ(s.final_score, 40.0 + 15.0 + 30.0);
  // A tier nobody measured has no reference, and a tier without a measurement scores 0.
  const auto none = reference_durations(race, {});
  for (double r : none) EXPECT_TRUE(std::isnan(r));
  EXPECT_EQ(score(race, a, none).final_score, 0.0);
  c.relative_accuracy_pct = 100;
  EXPECT_EQ(score(race, c, ref).final_score, 0.0);
}

TEST(ScoringTest, UserTargetsReplaceTheBestSeen) {
  const ScoringSpec spec = parse_ok("targets_s: {c1: 1.0, cinf: 2}");
  TrialMetrics a;
  a.duration_s = {2.0, 8.0, 4.0};
  a.relative_accuracy_pct = 99.5;
  const auto ref = reference_durations(spec, {a});
  EXPECT_EQ(ref, (std::array<double, kTiers>{1.0, 8.0, 2.0}));
  const Score s = score(spec, a, ref);
  EXPECT_DOUBLE_EQ(s.tier_score[0], 50.0);
  EXPECT_DOUBLE_EQ(s.tier_score[1], 100.0);
  EXPECT_DOUBLE_EQ(s.tier_score[2], 50.0);
  // Faster than the target scores above 100.
  a.duration_s[0] = 0.5;
  EXPECT_DOUBLE_EQ(score(spec, a, ref).tier_score[0], 200.0);
}

TEST(ScoringTest, CustomWeightsAndGate) {
  const ScoringSpec spec = parse_ok(
      "weights: {c1: 1, cinf: 3}\n"
      "gate: [{above: 90, c: 0.5}, {above: 95, c: 1.0}]");
  EXPECT_EQ(spec.weights, (std::array<double, kTiers>{1.0, 0.0, 3.0}));   // a tier left out weighs 0
  ASSERT_EQ(spec.gate.size(), 2u);
  EXPECT_EQ(spec.gate[0].above_pct, 95.0);   // sorted, highest threshold first
  EXPECT_EQ(spec.gate_levels(), (std::vector<double>{1.0, 0.5, 0.0}));
  EXPECT_EQ(spec.gate_multiplier(90.0), 0.0);
  EXPECT_EQ(spec.gate_multiplier(90.5), 0.5);
  EXPECT_EQ(spec.gate_multiplier(95.0), 0.5);
  EXPECT_EQ(spec.gate_multiplier(95.001), 1.0);
  TrialMetrics m;
  m.duration_s = {1, 1, 1};
  m.relative_accuracy_pct = 92;
  EXPECT_DOUBLE_EQ(score(spec, m, {1, 1, 1}).final_score, (100.0 + 300.0) * 0.5);
  // The same formula on official tier scores (RecordSubmission fills a final score with it).
  EXPECT_DOUBLE_EQ(final_score(spec, {80, 50, 90}, 0.5), (80 * 1.0 + 90 * 3.0) * 0.5);
  EXPECT_DOUBLE_EQ(final_score(ScoringSpec{}, {100, 100, 100}, 0.96), 96.0);
  // A threshold below 0 turns the gate off.
  const ScoringSpec open = parse_ok("gate: [{above: -1, c: 1}]");
  EXPECT_EQ(open.gate_multiplier(0.0), 1.0);
}

TEST(ScoringTest, ParseErrorsNameTheField) {
  EXPECT_EQ(error_of("[1]"), "scoring: must be a mapping with keys weights, gate, targets_s");
  EXPECT_EQ(error_of("weight: {c1: 1}"), "scoring.weight: unknown key; allowed: weights, gate, targets_s");
  EXPECT_EQ(error_of("weights: {c2: 1}"), "scoring.weights.c2: unknown tier; allowed: c1, c8, cinf");
  EXPECT_EQ(error_of("weights: [1, 2, 3]"), "scoring.weights: must be a mapping with keys from c1, c8, cinf");
  EXPECT_EQ(error_of("weights: {c1: fast}"), "scoring.weights.c1: fast is not a number");
  EXPECT_EQ(error_of("weights: {c1: .nan}"), "scoring.weights.c1: .nan is not a finite number");
  EXPECT_EQ(error_of("weights: {c1: -0.5, c8: 1}"), "scoring.weights.c1: -0.5 is negative");
  EXPECT_EQ(error_of("weights: {c1: 0, c8: 0, cinf: 0}"), "scoring.weights: must sum to more than 0");
  EXPECT_EQ(error_of("weights: {}"), "scoring.weights: must sum to more than 0");
  EXPECT_EQ(error_of("gate: []"), "scoring.gate: must be a non-empty list of {above: <percent>, c: <multiplier>}");
  EXPECT_EQ(error_of("gate: {above: 99, c: 1}"),
            "scoring.gate: must be a non-empty list of {above: <percent>, c: <multiplier>}");
  EXPECT_EQ(error_of("gate: [99]"), "scoring.gate[0]: must be a mapping {above: <percent>, c: <multiplier>}");
  EXPECT_EQ(error_of("gate: [{above: 99}]"), "scoring.gate[0].c: missing");
  EXPECT_EQ(error_of("gate: [{c: 1}]"), "scoring.gate[0].above: missing");
  EXPECT_EQ(error_of("gate: [{above: 99, c: 1, below: 3}]"), "scoring.gate[0].below: unknown key; allowed: above, c");
  EXPECT_EQ(error_of("gate: [{above: 100, c: 1}]"),
            "scoring.gate[0].above: must be below 100 (accuracy is capped at 100)");
  EXPECT_EQ(error_of("gate: [{above: 99, c: 1.5}]"), "scoring.gate[0].c: must be in (0, 1]");
  EXPECT_EQ(error_of("gate: [{above: 99, c: 0}]"), "scoring.gate[0].c: must be in (0, 1]");
  EXPECT_EQ(error_of("gate: [{above: 99, c: 1}, {above: 99, c: 0.9}]"), "scoring.gate[1].above: 99 is given twice");
  EXPECT_EQ(error_of("gate: [{above: 99, c: 0.9}, {above: 98, c: 1}]"),
            "scoring.gate: multiplier 1 above 98 is larger than 0.9 above 99; a higher "
            "threshold must not give a smaller multiplier");
  EXPECT_EQ(error_of("targets_s: {c8: 0}"), "scoring.targets_s.c8: must be a positive number of seconds");
  EXPECT_EQ(error_of("targets_s: {c9: 1}"), "scoring.targets_s.c9: unknown tier; allowed: c1, c8, cinf");
  Result<ScoringSpec> r = ScoringSpec::parse(YAML::Load("weights: {c1: -1}"), "job.scoring");
  EXPECT_EQ(r.status().message.rfind("job.scoring.weights.c1:", 0), 0u);
}

}  // namespace
}  // namespace soartune::search
