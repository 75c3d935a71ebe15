#include "search/bayes_strategy.h"

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

SearchProblem problem(const char* yaml) {
  SearchProblem p;
  auto s = Space::parse(YAML::Load(yaml));
  EXPECT_TRUE(s.ok()) << s.status().message;
  p.space = s.value();
  p.seed = 9;
  for (const ParamSpec& ps : p.space.params()) p.reference[ps.name] = ps.domain().front();
  return p;
}

const char* kSpace = R"(
weight_bits: {type: choice, values: [16, 8, 4]}
kv_cache_dtype: {type: choice, values: [bf16, fp8_e4m3, fp8_e5m2]}
max_running_requests: {type: pow2, low: 1, high: 64}
cuda_graphs: {type: bool}
)";

// A small analytic landscape: 4-bit weights and fp8 KV are fast but cost accuracy; big batches fail.
Observation run(const Config& c, std::mt19937_64& rng) {
  Observation o;
  o.config = c;
  const double bits = static_cast<double>(std::get<int64_t>(c.at("weight_bits")));
  const std::string kv = std::get<std::string>(c.at("kv_cache_dtype"));
  const double mrr = static_cast<double>(std::get<int64_t>(c.at("max_running_requests")));
  const bool graphs = std::get<bool>(c.at("cuda_graphs"));
  if (mrr >= 64 && kv == "bf16") {
    o.outcome = Outcome::kFailed;
    o.failure = FailureKind::kOutOfMemory;
    return o;
  }
  std::normal_distribution<double> n(0, 0.01);
  const double base = (0.4 + bits / 16) * (graphs ? 0.85 : 1.0) * (kv == "bf16" ? 1.0 : 0.93);
  o.outcome = Outcome::kComplete;
  o.metrics.duration_s = {10 * base * std::exp(n(rng)), 8 * base * 8 / std::min(mrr, 8.0) * std::exp(n(rng)),
                          6 * base * 16 / (mrr + 4) * std::exp(n(rng))};
  o.metrics.relative_accuracy_pct =
      100 - (bits == 4 ? 1.6 : bits == 8 ? 0.2 : 0) - (kv == "fp8_e5m2" ? 0.9 : kv == "fp8_e4m3" ? 0.3 : 0);
  return o;
}

// Up to n trials asked one at a time; the i-th suggested config is measured by observe(i, config). Stops early
// when the strategy suggests nothing.
template <typename Observe>
std::vector<Observation> history_of(SearchProblem& p, Strategy& s, int n, Observe observe) {
  std::vector<Observation> h;
  for (int i = 0; i < n; ++i) {
    auto sug = s.ask(p, h, 1);
    if (sug.empty()) break;
    h.push_back(observe(i, sug[0].config));
  }
  return h;
}

// Up to n trials on the analytic landscape (run).
std::vector<Observation> history_of(SearchProblem& p, Strategy& s, int n) {
  std::mt19937_64 rng(1);
  return history_of(p, s, n, [&rng](int, const Config& c) { return run(c, rng); });
}

TEST(BayesStrategy, StartsWithTheReferenceThenTheDesign) {
  SearchProblem p = problem(kSpace);
  auto s = make_bayes_strategy();
  EXPECT_EQ(s->name(), "bayes");
  auto first = s->ask(p, {}, 3);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].strategy, "reference");
  EXPECT_EQ(first[0].config, p.reference);
  EXPECT_EQ(first[1].strategy, "initial-design");
  EXPECT_NE(config_key(first[1].config), config_key(first[2].config));
}

TEST(BayesStrategy, SameSeedSameHistorySameSuggestions) {
  SearchProblem p = problem(kSpace);
  auto a = make_bayes_strategy();
  const auto h = history_of(p, *a, 12);
  auto b = make_bayes_strategy();
  const auto sa = a->ask(p, h, 2);
  const auto sb = b->ask(p, h, 2);
  ASSERT_EQ(sa.size(), 2u);
  ASSERT_EQ(sb.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(sa[i].config, sb[i].config);
    EXPECT_EQ(sa[i].expected_improvement, sb[i].expected_improvement);
    EXPECT_EQ(sa[i].strategy, "bayes");
  }
}

TEST(BayesStrategy, SuggestionsAreExplained) {
  SearchProblem p = problem(kSpace);
  auto s = make_bayes_strategy();
  const auto h = history_of(p, *s, 10);
  const auto sug = s->ask(p, h, 1);
  ASSERT_EQ(sug.size(), 1u);
  const Suggestion& g = sug[0];
  EXPECT_EQ(g.strategy, "bayes");
  ASSERT_EQ(g.p_gate.size(), p.scoring.gate_levels().size());
  EXPECT_NEAR(std::accumulate(g.p_gate.begin(), g.p_gate.end(), 0.0), 1.0, 1e-9);
  EXPECT_TRUE(std::isfinite(g.predicted_score) && g.predicted_score > 0);
  EXPECT_TRUE(std::isfinite(g.predicted_score_std) && g.predicted_score_std >= 0);
  EXPECT_TRUE(std::isfinite(g.expected_improvement) && g.expected_improvement >= 0);
  EXPECT_TRUE(g.p_failure >= 0 && g.p_failure <= 1);
  EXPECT_FALSE(g.note.empty());
  ASSERT_TRUE(s->last_expected_improvement_pct().has_value());
  EXPECT_GE(*s->last_expected_improvement_pct(), 0);
}

TEST(BayesStrategy, NeverResuggestsAndExhaustsTheSpace) {
  SearchProblem p = problem(R"(
weight_bits: {type: choice, values: [16, 8, 4]}
kv_cache_dtype: {type: choice, values: [bf16, fp8_e4m3]}
cuda_graphs: {type: bool}
)");
  auto s = make_bayes_strategy();
  std::set<std::string> seen;
  const auto h = history_of(p, *s, 20, [&](int i, const Config& c) {
    EXPECT_TRUE(seen.insert(config_key(p.space.canonical(c, p.reference))).second) << "trial " << i;
    Observation o;
    o.config = c;
    o.outcome = Outcome::kComplete;
    o.metrics.duration_s = {1.0 + 0.1 * i, 1.0, 1.0};
    o.metrics.relative_accuracy_pct = 99.5;
    return o;
  });
  EXPECT_EQ(seen.size(), 12u);   // 3 * 2 * 2 configs, each once, then nothing
  EXPECT_TRUE(s->ask(p, h, 1).empty());
}

TEST(BayesStrategy, ParallelSuggestionsAvoidPendingAndEachOther) {
  SearchProblem p = problem(kSpace);
  auto s = make_bayes_strategy();
  auto h = history_of(p, *s, 10);
  Observation pending;
  pending.config = s->ask(p, h, 1)[0].config;
  pending.outcome = Outcome::kPending;
  h.push_back(pending);
  const auto sug = s->ask(p, h, 4);
  ASSERT_EQ(sug.size(), 4u);
  std::set<std::string> keys;
  for (const Observation& o : h) keys.insert(config_key(p.space.canonical(o.config, p.reference)));
  for (const Suggestion& g : sug) {
    EXPECT_TRUE(keys.insert(config_key(p.space.canonical(g.config, p.reference))).second);
    EXPECT_EQ(g.strategy, "bayes");
  }
}

TEST(BayesStrategy, WarmStartSkipsTheDesign) {
  SearchProblem p = problem(kSpace);
  auto s = make_bayes_strategy();
  p.prior = history_of(p, *s, 12);
  auto first = s->ask(p, {}, 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].strategy, "reference");
  EXPECT_EQ(first[1].strategy, "bayes");
}

TEST(BayesStrategy, ConstantAndFailedObservationsGiveFiniteSuggestions) {
  SearchProblem p = problem(kSpace);
  auto s = make_bayes_strategy();
  const auto h = history_of(p, *s, 8, [](int i, const Config& c) {
    Observation o;
    o.config = c;
    if (i % 3 == 2) {
      o.outcome = Outcome::kFailed;
      o.failure = FailureKind::kTimeout;
    } else {
      o.outcome = Outcome::kComplete;
      o.metrics.duration_s = {2.0, 2.0, 2.0};   // identical measurements everywhere
      o.metrics.relative_accuracy_pct = 100.0;
    }
    return o;
  });
  ASSERT_EQ(h.size(), 8u);
  const auto sug = s->ask(p, h, 2);
  ASSERT_EQ(sug.size(), 2u);
  for (const Suggestion& g : sug) {
    EXPECT_TRUE(std::isfinite(g.predicted_score));
    EXPECT_TRUE(std::isfinite(g.predicted_score_std));
    EXPECT_TRUE(std::isfinite(g.expected_improvement));
    EXPECT_TRUE(std::isfinite(g.p_failure));
  }
}

TEST(BayesStrategy, AllFailedKeepsExploring) {
  SearchProblem p = problem(kSpace);
  auto s = make_bayes_strategy();
  const auto h = history_of(p, *s, 12, [](int, const Config& c) {
    Observation o;
    o.config = c;
    o.outcome = Outcome::kFailed;
    return o;
  });
  ASSERT_EQ(h.size(), 12u);
  EXPECT_EQ(s->ask(p, h, 1).size(), 1u);
}

}  // namespace
}  // namespace soartune::search

// A reference outside the space (16-bit weights while the space holds 8 and 4) must not hide the in-space
// config its value would otherwise be clamped to.
TEST(BayesStrategyReference, ReferenceOutsideTheSpaceDoesNotHideAnInSpaceConfig) {
  using namespace soartune::search;
  YAML::Node node = YAML::Load("{weight_bits: {type: choice, values: [8, 4]}}");
  auto space = Space::parse(node);
  ASSERT_TRUE(space.ok()) << space.status().message;
  SearchProblem problem;
  problem.space = space.value();
  problem.reference = soartune::Config{{"weight_bits", int64_t{16}}};
  std::vector<Observation> history(1);
  history[0].config = problem.reference;
  history[0].outcome = Outcome::kComplete;
  history[0].metrics.duration_s = {1.0, 1.0, 1.0};
  history[0].metrics.relative_accuracy_pct = 100.0;
  auto strategy = make_bayes_strategy();
  auto picks = strategy->ask(problem, history, 2);
  ASSERT_EQ(picks.size(), 2u);
  std::set<int64_t> bits;
  for (const auto& s : picks) bits.insert(std::get<int64_t>(s.config.at("weight_bits")));
  EXPECT_EQ(bits, (std::set<int64_t>{8, 4}));
}
