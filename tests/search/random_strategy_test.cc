#include "search/random_strategy.h"

#include <set>

#include <gtest/gtest.h>

#include "core/knob_catalogue.h"

namespace soartune::search {
namespace {

SearchProblem problem_for(const std::string& space_yaml, uint64_t seed = 1, Config reference_overrides = {}) {
  SearchProblem p;
  Result<Space> s = Space::parse(YAML::Load(space_yaml));
  EXPECT_TRUE(s.ok()) << s.status().message;
  p.space = s.value();
  p.reference = core::reference_config(reference_overrides).value();
  p.seed = seed;
  return p;
}

const char* kSpace = R"(
weight_bits: {type: choice, values: [16, 8, 4]}
weight_group_size: {type: choice, values: [32, 64, 128], when: {weight_bits: [4]}}
kv_cache_dtype: {type: choice, values: [bf16, fp16, fp8_e4m3, fp8_e5m2]}
kv_page_size: {type: pow2, low: 8, high: 64}
max_running_requests: {type: int, low: 1, high: 64, log: true}
cuda_graphs: {type: bool}
)";

// 16-bit and 8-bit weights, and 4-bit with two group sizes: 4 configs.
const char* kTinySpace = R"(
weight_bits: {type: choice, values: [16, 8, 4]}
weight_group_size: {type: choice, values: [32, 128], when: {weight_bits: [4]}}
)";

Observation observed(Config c, Outcome o = Outcome::kComplete) {
  Observation ob;
  ob.config = std::move(c);
  ob.outcome = o;
  return ob;
}

TEST(RandomStrategyTest, FactoryKnowsRandom) {
  auto r = make_strategy("random");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value()->name(), "random");
  auto bad = make_strategy("grid");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message, "strategy: 'grid' is not one of bayes, random");
}

TEST(RandomStrategyTest, TrialZeroIsTheCanonicalReference) {
  const SearchProblem p = problem_for(kSpace, 3, {{"weight_bits", int64_t{16}}, {"mem_fraction_pct", int64_t{90}}});
  auto s = make_random_strategy();
  std::vector<Suggestion> first = s->ask(p, {}, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].strategy, "reference");
  EXPECT_EQ(first[0].config, p.space.canonical(p.reference, p.reference));
  EXPECT_EQ(first[0].config.count("weight_group_size"), 0u);   // inactive at 16 bits
  EXPECT_EQ(first[0].config.at("kv_cache_dtype"), Value{std::string("bf16")});
  // The reference suggested once is not suggested again, even when stored with every knob.
  std::vector<Suggestion> next = s->ask(p, {observed(p.reference, Outcome::kPending)}, 4);
  ASSERT_EQ(next.size(), 4u);
  for (const Suggestion& g : next) {
    EXPECT_EQ(g.strategy, "random");
    EXPECT_NE(config_key(g.config), config_key(first[0].config));
    EXPECT_TRUE(p.space.validate(g.config).ok()) << p.space.validate(g.config).message;
  }
}

TEST(RandomStrategyTest, ABatchHoldsTheReferenceAndDistinctSamples) {
  const SearchProblem p = problem_for(kSpace);
  std::vector<Suggestion> batch = make_random_strategy()->ask(p, {}, 8);
  ASSERT_EQ(batch.size(), 8u);
  EXPECT_EQ(batch[0].strategy, "reference");
  std::set<std::string> keys;
  for (const Suggestion& g : batch) keys.insert(config_key(g.config));
  EXPECT_EQ(keys.size(), 8u);
}

TEST(RandomStrategyTest, NeverRepeatsAndStopsWhenExhausted) {
  const SearchProblem p = problem_for(kTinySpace);
  auto s = make_random_strategy();
  std::vector<Observation> history;
  std::set<std::string> keys;
  for (int round = 0; round < 6; ++round) {
    std::vector<Suggestion> g = s->ask(p, history, 1);
    if (g.empty()) break;
    ASSERT_EQ(g.size(), 1u);
    EXPECT_TRUE(keys.insert(config_key(g[0].config)).second) << config_key(g[0].config);
    // Alternate outcomes: failed and pending trials count as tried too.
    history.push_back(observed(g[0].config, round % 3 == 0 ? Outcome::kComplete
                                            : round % 3 == 1 ? Outcome::kFailed
                                                             : Outcome::kPending));
  }
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_TRUE(s->ask(p, history, 3).empty());
}

TEST(RandomStrategyTest, FewerThanAskedNearExhaustion) {
  const SearchProblem p = problem_for(kTinySpace);
  std::vector<Suggestion> g = make_random_strategy()->ask(p, {}, 10);
  EXPECT_EQ(g.size(), 4u);
  std::set<std::string> keys;
  for (const Suggestion& x : g) keys.insert(config_key(x.config));
  EXPECT_EQ(keys.size(), 4u);
}

TEST(RandomStrategyTest, HistoryConfigsAreCanonicalisedBeforeComparing) {
  const SearchProblem p = problem_for(kTinySpace);
  // Stored trials carry every knob, and a 16-bit one an (inactive) group size; they still match.
  std::vector<Observation> history = {observed(p.reference)};
  Config eight = p.reference;
  eight["weight_bits"] = int64_t{8};
  eight["weight_group_size"] = int64_t{32};
  history.push_back(observed(eight, Outcome::kFailed));
  std::vector<Suggestion> g = make_random_strategy()->ask(p, history, 5);
  ASSERT_EQ(g.size(), 2u);
  for (const Suggestion& x : g) EXPECT_EQ(x.config.at("weight_bits"), Value{int64_t{4}});
}

TEST(RandomStrategyTest, DeterministicForSeedAndHistory) {
  const SearchProblem p1 = problem_for(kSpace, 11), p2 = problem_for(kSpace, 12);
  std::vector<Observation> history = {observed(p1.reference)};
  auto a = make_random_strategy()->ask(p1, history, 5);
  auto b = make_random_strategy()->ask(p1, history, 5);
  auto c = make_random_strategy()->ask(p2, history, 5);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  ASSERT_EQ(c.size(), 5u);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].config, b[i].config);
    differs |= a[i].config != c[i].config;
  }
  EXPECT_TRUE(differs);
  // The same strategy object asked twice gives the same answer: no hidden state.
  auto s = make_random_strategy();
  EXPECT_EQ(s->ask(p1, history, 3)[2].config, s->ask(p1, history, 3)[2].config);
}

TEST(RandomStrategyTest, EmptySpaceHasOnlyTheReference) {
  const SearchProblem p = problem_for("{}");
  auto s = make_random_strategy();
  std::vector<Suggestion> g = s->ask(p, {}, 3);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].strategy, "reference");
  EXPECT_TRUE(s->ask(p, {observed(p.reference)}, 3).empty());
}

}  // namespace
}  // namespace soartune::search
