// A trial the runner stopped early (Outcome::kPruned) is neither a measurement nor a failure: the models leave it
// out, and no strategy suggests its config again.
#include <set>

#include <gtest/gtest.h>

#include "search/bayes_models.h"
#include "search/bayes_strategy.h"
#include "search/encoding.h"
#include "search/random_strategy.h"

namespace soartune::search {
namespace {

SearchProblem problem() {
  SearchProblem p;
  auto s = Space::parse(YAML::Load("weight_bits: {type: choice, values: [16, 8, 4]}\n"
                                   "max_running_requests: {type: pow2, low: 1, high: 8}\n"));
  EXPECT_TRUE(s.ok()) << s.status().message;
  p.space = s.value();
  p.seed = 3;
  for (const ParamSpec& ps : p.space.params()) p.reference[ps.name] = ps.domain().front();
  return p;
}

Observation complete(Config c, double d, double acc) {
  Observation o;
  o.config = std::move(c);
  o.outcome = Outcome::kComplete;
  o.metrics.duration_s = {d, d, d};
  o.metrics.relative_accuracy_pct = acc;
  return o;
}

TEST(PrunedOutcome, LeftOutOfTheModelsNeverSuggestedAgain) {
  SearchProblem p = problem();
  std::vector<Observation> h;
  h.push_back(complete(p.reference, 1.0, 100));
  h.push_back(complete({{"weight_bits", int64_t{8}}, {"max_running_requests", int64_t{2}}}, 0.8, 99.5));
  h.push_back(complete({{"weight_bits", int64_t{8}}, {"max_running_requests", int64_t{4}}}, 0.7, 99.5));
  Observation pruned;
  pruned.config = {{"weight_bits", int64_t{4}}, {"max_running_requests", int64_t{8}}};
  pruned.outcome = Outcome::kPruned;   // metrics unset: its tiers were never measured
  h.push_back(pruned);

  const SurrogateModels with(p, h);
  const SurrogateModels without(p, std::vector<Observation>(h.begin(), h.end() - 1));
  EXPECT_EQ(with.training_count(), without.training_count());
  EXPECT_EQ(with.complete_count(), without.complete_count());
  // Nor does it teach the failure model: the predicted failure probability is the same as without it.
  const auto a = with.predict(std::vector<Config>{pruned.config});
  const auto b = without.predict(std::vector<Config>{pruned.config});
  EXPECT_DOUBLE_EQ(a[0].p_failure, b[0].p_failure);

  const Encoding enc(p.space.params());
  const std::string key = config_key(enc.canonical(pruned.config, p.reference));
  std::vector<std::unique_ptr<Strategy>> strategies;
  strategies.push_back(make_bayes_strategy());
  strategies.push_back(make_random_strategy());
  for (const auto& strategy : strategies) {
    std::vector<Observation> hist = h;
    for (int round = 0; round < 3; ++round) {
      for (const Suggestion& s : strategy->ask(p, hist, 2)) {
        EXPECT_NE(config_key(enc.canonical(s.config, p.reference)), key) << strategy->name();
        hist.push_back(complete(s.config, 0.9, 99));
      }
    }
  }
}

}  // namespace
}  // namespace soartune::search
