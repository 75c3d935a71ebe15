#include "search/multi_fidelity.h"

#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "core/knob_catalogue.h"
#include "search/bayes_models.h"
#include "search/bayes_strategy.h"
#include "search/random_strategy.h"

namespace soartune::search {
namespace {

const char* kSpace = R"(
weight_bits: {type: choice, values: [16, 8, 4]}
kv_cache_dtype: {type: choice, values: [bf16, fp16, fp8_e4m3, fp8_e5m2]}
max_running_requests: {type: int, low: 1, high: 64, log: true}
)";

SearchProblem problem(std::vector<double> levels = {1.0 / 9, 1.0 / 3, 1.0}, int eta = 3) {
  SearchProblem p;
  Result<Space> s = Space::parse(YAML::Load(kSpace));
  EXPECT_TRUE(s.ok()) << s.status().message;
  p.space = s.value();
  p.reference = core::reference_config({}).value();
  p.seed = 5;
  p.fidelity_levels = std::move(levels);
  p.eta = eta;
  return p;
}

Config cfg(int64_t bits, const char* kv, int64_t mrr) {
  return {{"weight_bits", Value{bits}}, {"kv_cache_dtype", Value{std::string(kv)}}, {"max_running_requests", Value{mrr}}};
}

// Durations scale with 1/speed (larger is faster); accuracy 100.
Observation complete(Config c, double fidelity, double speed) {
  Observation o;
  o.config = std::move(c);
  o.outcome = Outcome::kComplete;
  o.fidelity = fidelity;
  for (double& d : o.metrics.duration_s) d = fidelity / speed;
  o.metrics.relative_accuracy_pct = 100;
  return o;
}

TEST(MultiFidelityTest, LevelsAreCheckedFieldByField) {
  EXPECT_TRUE(check_fidelity_levels({0.11, 0.33, 1.0}, 3, "multi_fidelity").ok());
  EXPECT_EQ(check_fidelity_levels({1.0}, 3, "multi_fidelity").message,
            "multi_fidelity.levels: must list 2..6 workload fractions, ascending, ending with 1 (got 1)");
  EXPECT_EQ(check_fidelity_levels({0.5, 0.25, 1.0}, 3, "multi_fidelity").message,
            "multi_fidelity.levels[1]: must be larger than the level before it (levels ascend)");
  EXPECT_EQ(check_fidelity_levels({0.0, 1.0}, 3, "multi_fidelity").message,
            "multi_fidelity.levels[0]: must be a number in (0, 1]");
  EXPECT_EQ(check_fidelity_levels({0.2, 0.9}, 3, "multi_fidelity").message,
            "multi_fidelity.levels[1]: the last level must be 1 (the full workload)");
  EXPECT_EQ(check_fidelity_levels({0.2, 1.0}, 1, "multi_fidelity").message,
            "multi_fidelity.eta: must be an integer in 2..10");
}

TEST(MultiFidelityTest, FidelityCoordinateIsLogScaledToTheUnitInterval) {
  const std::vector<double> levels = {1.0 / 9, 1.0 / 3, 1.0};
  EXPECT_DOUBLE_EQ(fidelity_coordinate(levels, 1.0 / 9), 0.0);
  EXPECT_NEAR(fidelity_coordinate(levels, 1.0 / 3), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(fidelity_coordinate(levels, 1.0), 1.0);
  EXPECT_EQ(fidelity_level_index(levels, 1.0 / 3), 1);
  EXPECT_EQ(fidelity_level_index(levels, 0.5), -1);
}

TEST(MultiFidelityTest, TheTopThirdOfARungIsPromotedBestFirstOnce) {
  const SearchProblem p = problem();
  std::vector<Observation> h;
  // Six configs complete at the lowest level, speeds 1..6: floor(6 / 3) = 2 promotions are due.
  for (int i = 1; i <= 6; ++i) h.push_back(complete(cfg(8, "bf16", i), 1.0 / 9, i));
  std::optional<Suggestion> first = next_promotion(p, h);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->strategy, "promotion");
  EXPECT_NEAR(first->fidelity, 1.0 / 3, 1e-12);
  EXPECT_EQ(first->config.at("max_running_requests"), Value{int64_t{6}});
  Observation started = complete(first->config, first->fidelity, 6);
  started.outcome = Outcome::kPending;   // running counts as promoted: never twice
  h.push_back(started);
  std::optional<Suggestion> second = next_promotion(p, h);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->config.at("max_running_requests"), Value{int64_t{5}});
  h.push_back(complete(second->config, second->fidelity, 5));
  EXPECT_FALSE(next_promotion(p, h)) << "the third-best of six is not in the top 1/3";
  // Three complete at the middle level: the best of them goes to the full run before anything else.
  h.back() = complete(cfg(8, "bf16", 5), 1.0 / 3, 5);
  h.push_back(complete(cfg(8, "bf16", 6), 1.0 / 3, 6));
  h.push_back(complete(cfg(16, "fp16", 2), 1.0 / 3, 2));
  for (int i = 1; i <= 3; ++i) h.push_back(complete(cfg(4, "fp16", i), 1.0 / 9, 10 + i));
  std::optional<Suggestion> up = next_promotion(p, h);
  ASSERT_TRUE(up);
  EXPECT_DOUBLE_EQ(up->fidelity, 1.0);
  EXPECT_EQ(up->config.at("max_running_requests"), Value{int64_t{6}});
}

TEST(MultiFidelityTest, AGatedOutConfigIsNotPromoted) {
  const SearchProblem p = problem({0.25, 1.0}, 2);
  std::vector<Observation> h = {complete(cfg(4, "bf16", 4), 0.25, 10), complete(cfg(8, "bf16", 4), 0.25, 1)};
  h[0].metrics.relative_accuracy_pct = 50;   // C = 0 however fast: the slow config that passes the gate wins
  std::optional<Suggestion> up = next_promotion(p, h);
  ASSERT_TRUE(up);
  EXPECT_EQ(up->config.at("weight_bits"), Value{int64_t{8}});
  h[1].metrics.relative_accuracy_pct = 50;
  EXPECT_FALSE(next_promotion(p, h)) << "nothing that scores 0 is worth a full run";
}

TEST(MultiFidelityTest, NewConfigsStartAtTheLowestLevelAndPromotionsComeFirst) {
  const SearchProblem p = problem();
  auto s = with_multi_fidelity(make_random_strategy());
  std::vector<Observation> h = {complete(p.reference, 1.0, 1)};
  std::vector<Suggestion> batch = s->ask(p, h, 4);
  ASSERT_EQ(batch.size(), 4u);
  for (const Suggestion& g : batch) EXPECT_NEAR(g.fidelity, 1.0 / 9, 1e-12);
  for (int i = 1; i <= 3; ++i) h.push_back(complete(cfg(8, "fp16", i), 1.0 / 9, i));
  batch = s->ask(p, h, 2);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].strategy, "promotion");
  EXPECT_EQ(batch[0].config.at("max_running_requests"), Value{int64_t{3}});
  EXPECT_NEAR(batch[1].fidelity, 1.0 / 9, 1e-12);
  EXPECT_NE(batch[1].strategy, "promotion");
}

TEST(MultiFidelityTest, OnceEveryConfigIsScreenedTheRestArePromotedBestFirst) {
  // A two-config space: both screened, the reference at both levels; ASHA's top 1/3 of 3 is the reference.
  SearchProblem p = problem({0.5, 1.0}, 3);
  p.space = Space::parse(YAML::Load("weight_bits: {type: choice, values: [16, 8, 4]}")).value();
  auto s = with_multi_fidelity(make_random_strategy());
  std::vector<Observation> h = {complete(p.reference, 1.0, 1), complete(p.reference, 0.5, 1)};
  Config eight = {{"weight_bits", Value{int64_t{8}}}}, four = {{"weight_bits", Value{int64_t{4}}}};
  h.push_back(complete(eight, 0.5, 0.9));
  h.push_back(complete(four, 0.5, 0.5));
  std::vector<Suggestion> b = s->ask(p, h, 3);
  ASSERT_EQ(b.size(), 2u) << "the two screened configs, then nothing";
  EXPECT_EQ(b[0].strategy, "promotion");
  EXPECT_EQ(b[0].config.at("weight_bits"), Value{int64_t{8}});
  EXPECT_EQ(b[1].config.at("weight_bits"), Value{int64_t{4}});
  EXPECT_EQ(b[1].fidelity, 1.0);
}

TEST(MultiFidelityTest, TheModelsLearnTheLowToFullRelationAndRankOnFullRunsOnly) {
  // Full-run durations are 3 x the low level's, a shift the fidelity input has to carry: a config seen only
  // at the low level is predicted at its full-run duration.
  SearchProblem p = problem({1.0 / 3, 1.0}, 3);
  std::vector<Observation> h;
  int n = 0;
  for (int64_t bits : {16, 8, 4})
    for (const char* kv : {"bf16", "fp16", "fp8_e4m3"})
      for (int64_t mrr : {1, 8, 64}) {
        const double speed = 1.0 + 0.5 * (bits == 8) + 1.0 * (bits == 4) + 0.2 * std::log2(static_cast<double>(mrr));
        h.push_back(complete(cfg(bits, kv, mrr), 1.0 / 3, speed));
        if (++n % 4 == 0) h.push_back(complete(cfg(bits, kv, mrr), 1.0, speed));
      }
  const SurrogateModels m(p, h);
  EXPECT_EQ(m.complete_count(), n / 4);
  EXPECT_EQ(m.training_count(), n + n / 4);
  for (const Config& c : m.complete_configs()) EXPECT_TRUE(c.count("weight_bits"));
  const Config unseen_full = cfg(4, "fp8_e4m3", 1);   // n = 25 for it: only the low level was run
  const double speed = 2.0;
  const auto pred = m.predict(std::vector<Config>{p.space.canonical(unseen_full, p.reference)});
  for (int t = 0; t < kTiers; ++t) EXPECT_NEAR(pred[0].log_duration_mean[t], std::log(1.0 / speed), 0.15) << t;
}

TEST(MultiFidelityTest, BayesWithLevelsSuggestsFreshConfigsForTheFullRun) {
  SearchProblem p = problem({1.0 / 3, 1.0}, 3);
  auto s = with_multi_fidelity(make_bayes_strategy());
  std::vector<Observation> h = {complete(p.reference, 1.0, 1), complete(p.reference, 1.0 / 3, 1)};
  std::set<std::string> seen;
  for (int round = 0; round < 14; ++round) {
    std::vector<Suggestion> b = s->ask(p, h, 1);
    ASSERT_EQ(b.size(), 1u);
    const Suggestion& g = b[0];
    const double speed = 1.0 + (g.config.at("weight_bits") == Value{int64_t{4}}) +
                         0.1 * static_cast<double>(std::get<int64_t>(g.config.at("max_running_requests")));
    if (g.strategy != "promotion") {
      EXPECT_NEAR(g.fidelity, 1.0 / 3, 1e-12);
      EXPECT_TRUE(seen.insert(config_key(g.config)).second) << "a new config is new";
    }
    h.push_back(complete(g.config, g.fidelity, speed));
  }
  int full = 0;
  for (const Observation& o : h) full += o.fidelity == 1.0;
  EXPECT_GE(full, 2) << "promotions reached the full run";
}

}  // namespace
}  // namespace soartune::search
