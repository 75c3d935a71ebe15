// Multi-fidelity in the daemon: the `multi_fidelity:` spec section (every error names its field), how a level
// shortens the workload and the accuracy set in the trial file, and the scored state ranking full runs only.
#include "daemon/fidelity.h"

#include <gtest/gtest.h>

#include "daemon/scored_trials.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::TempDir;

const char* kSpec = R"(name: mf
model: synthetic:tiny
backend: cpu
budget: {trials: 10}
workload: {name: w, requests: [{name: a, input_len: 64, output_len: 90, count: 9}, {name: b, input_len: 8, output_len: 4, count: 1}]}
accuracy: {set: synthetic, samples: 18}
space:
  weight_bits: {type: choice, values: [16, 8, 4]}
)";

Result<JobSpec> parse(const std::string& extra) {
  return parse_job_spec(std::string(kSpec) + extra, SpecContext{"/nonexistent"});
}

void expect_error(const std::string& extra, const std::string& message) {
  Result<JobSpec> r = parse(extra);
  ASSERT_FALSE(r.ok()) << extra;
  EXPECT_EQ(r.status().code, soartune::Code::kInvalidArgument);
  EXPECT_EQ(r.status().message, message);
}

TEST(FidelitySpec, OffByDefaultAndLevelsDefaultToPowersOfEta) {
  Result<JobSpec> off = parse("");
  ASSERT_TRUE(off.ok()) << off.status().message;
  EXPECT_TRUE(off.value().fidelity_levels.empty());
  Result<JobSpec> r = parse("multi_fidelity: {eta: 3}\n");
  ASSERT_TRUE(r.ok()) << r.status().message;
  ASSERT_EQ(r.value().fidelity_levels.size(), 3u);
  EXPECT_NEAR(r.value().fidelity_levels[0], 1.0 / 9, 1e-15);
  EXPECT_NEAR(r.value().fidelity_levels[1], 1.0 / 3, 1e-15);
  EXPECT_EQ(r.value().fidelity_levels[2], 1.0);
  EXPECT_EQ(r.value().fidelity_eta, 3);
  Result<JobSpec> two = parse("multi_fidelity: {levels: [0.25, 1], eta: 4}\n");
  ASSERT_TRUE(two.ok()) << two.status().message;
  EXPECT_EQ(two.value().fidelity_levels, (std::vector<double>{0.25, 1.0}));
}

TEST(FidelitySpec, BadSectionsNameTheField) {
  expect_error("multi_fidelity: 3\n", "multi_fidelity: must be a mapping {levels, eta} or {rungs, eta}");
  expect_error("multi_fidelity: {levels: [0.5, 1], speed: 2}\n", "multi_fidelity.speed: unknown key; allowed: levels, eta, rungs");
  expect_error("multi_fidelity: {levels: [0.5, 1], eta: 1}\n", "multi_fidelity.eta: must be an integer in 2..10");
  expect_error("multi_fidelity: {levels: [0.5, 1], eta: x}\n", "multi_fidelity.eta: must be an integer in 2..10");
  expect_error("multi_fidelity: {levels: [0.5, nope]}\n", "multi_fidelity.levels[1]: must be a number in (0, 1]");
  expect_error("multi_fidelity: {levels: [0.5, 0.3, 1]}\n",
               "multi_fidelity.levels[1]: must be larger than the level before it (levels ascend)");
  expect_error("multi_fidelity: {levels: [0.5, 0.9]}\n",
               "multi_fidelity.levels[1]: the last level must be 1 (the full workload)");
  expect_error("multi_fidelity: {rungs: 9}\n", "multi_fidelity.rungs: must be an integer in 2..6");
  expect_error("multi_fidelity: {levels: [0.5, 1], rungs: 2}\n", "multi_fidelity.rungs: give levels or rungs, not both");
  // 0.001 and 0.01 both shorten every count, output length and the samples to 1: the lower level saves nothing.
  expect_error("multi_fidelity: {levels: [0.001, 0.01, 1]}\n",
               "multi_fidelity.levels[0]: 0.001 runs the same workload and accuracy samples as level 0.01 (counts, "
               "output lengths and samples are too small to shorten further); drop it or raise it");
}

TEST(FidelitySpec, ALevelShortensCountsOutputsAndSamplesAndKeepsPrompts) {
  Result<JobSpec> r = parse("multi_fidelity: {eta: 3}\n");
  ASSERT_TRUE(r.ok()) << r.status().message;
  const JobSpec& spec = r.value();
  EXPECT_EQ(shortened_count(9, 1.0 / 3), 3);    // exactly, despite 9 * 0.333.. rounding above 3 in floating point
  EXPECT_EQ(shortened_count(90, 1.0 / 9), 10);
  EXPECT_EQ(shortened_count(4, 1.0 / 9), 1);
  EXPECT_EQ(shortened_count(7, 1.0), 7);
  const std::string file = trial_yaml_at(spec, spec.reference, ReferenceFile{"", "/tmp/ref.json", ""}, 1.0 / 9);
  YAML::Node t = YAML::Load(file);
  EXPECT_NEAR(t["fidelity"].as<double>(), 1.0 / 9, 1e-15);
  EXPECT_EQ(t["workload"]["requests"][0]["count"].as<int>(), 1);
  EXPECT_EQ(t["workload"]["requests"][0]["output_len"].as<int>(), 10);
  EXPECT_EQ(t["workload"]["requests"][0]["input_len"].as<int>(), 64);
  EXPECT_EQ(t["workload"]["requests"][1]["output_len"].as<int>(), 1);
  EXPECT_EQ(t["accuracy"]["samples"].as<int>(), 2);
  // The full level is the spec's own trial file, with no fidelity key.
  YAML::Node full = YAML::Load(trial_yaml_at(spec, spec.reference, ReferenceFile{}, 1.0));
  EXPECT_FALSE(full["fidelity"].IsDefined());
  EXPECT_EQ(full["workload"]["requests"][0]["count"].as<int>(), 9);
  EXPECT_EQ(full["accuracy"]["samples"].as<int>(), 18);
  EXPECT_EQ(reference_file_name(spec, 1.0), "reference.json");
  EXPECT_EQ(reference_file_name(spec, 1.0 / 3), "reference-level1.json");
}

TrialRecord complete(int64_t n, double fidelity, double seconds, bool reference = false) {
  TrialRecord t;
  t.job_id = "j";
  t.number = n;
  t.status = TrialStatus::kComplete;
  t.fidelity = fidelity;
  t.is_reference = reference;
  t.tiers = {{"c1", 1, seconds}, {"c8", 8, seconds}, {"cinf", 0, seconds}};
  t.relative_accuracy = 100;
  return t;
}

TEST(FidelityScoring, OnlyFullRunsAreBestAndScreeningRunsScoreWithinTheirLevel) {
  ScoredTrials ts;
  ts.put(complete(0, 1.0, 2.0, true));
  ts.put(complete(1, 0.25, 0.5, true));
  ts.put(complete(2, 0.25, 0.25));   // twice as fast as its level's reference, and 8x "faster" than the full run
  ts.put(complete(3, 1.0, 1.6));
  ASSERT_TRUE(ts.best());
  EXPECT_EQ(ts.best()->number, 3);
  EXPECT_DOUBLE_EQ(ts.find(0)->score, 80.0);     // relative to the full runs' best, 1.6 s
  EXPECT_DOUBLE_EQ(ts.find(1)->score, 50.0);     // relative to its level's best, 0.25 s
  EXPECT_DOUBLE_EQ(ts.find(2)->score, 100.0);
  EXPECT_DOUBLE_EQ(ts.find(3)->score, 100.0);
  EXPECT_TRUE(ts.reference_complete());
  ScoredTrials screening_only;
  screening_only.put(complete(0, 0.25, 0.5, true));
  EXPECT_FALSE(screening_only.best()) << "no full run yet, so no best";
  EXPECT_FALSE(screening_only.reference_complete()) << "the full reference is the baseline";
  Result<JobSpec> three = parse("multi_fidelity: {levels: [0.25, 0.5, 1]}\n");
  ASSERT_TRUE(three.ok()) << three.status().message;
  EXPECT_EQ(reference_level_missing(three.value(), screening_only), 0.5);
}

}  // namespace
}  // namespace soartune::daemon
