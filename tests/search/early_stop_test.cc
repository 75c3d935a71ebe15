#include "search/early_stop.h"

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

TEST(EarlyStopTest, TheBoundTakesUnmeasuredTiersAtTheBestSeen) {
  const ScoringSpec spec;   // weights 0.4, 0.3, 0.3; C = 1 above 99%
  const std::array<double, kTiers> best = {1.0, 1.0, 1.0};
  EXPECT_DOUBLE_EQ(score_upper_bound(spec, 100, {std::nullopt, std::nullopt, std::nullopt}, best), 100.0);
  // c1 twice the best: S1 = 50, the others at most 100: 0.4 * 50 + 0.6 * 100.
  EXPECT_DOUBLE_EQ(score_upper_bound(spec, 100, {2.0, std::nullopt, std::nullopt}, best), 80.0);
  // Faster than the best seen counts as 100 (it becomes the best), and the gate multiplies.
  EXPECT_DOUBLE_EQ(score_upper_bound(spec, 98.5, {0.5, std::nullopt, std::nullopt}, best), 96.0);
}

TEST(EarlyStopTest, StopsHopelessTrialsOnlyAfterTheirTiersAndNeverWithoutAnIncumbent) {
  const ScoringSpec spec;
  const std::array<double, kTiers> best = {1.0, 1.0, 1.0};
  const EarlyStopRule rule{1, 0.0};
  EXPECT_FALSE(should_stop_early(rule, spec, 100, {2.0, std::nullopt, std::nullopt}, 0, best, 90)) << "too early";
  EXPECT_TRUE(should_stop_early(rule, spec, 100, {2.0, std::nullopt, std::nullopt}, 1, best, 90));
  EXPECT_FALSE(should_stop_early(rule, spec, 100, {2.0, std::nullopt, std::nullopt}, 1, best, 79));
  EXPECT_FALSE(should_stop_early(rule, spec, 100, {2.0, std::nullopt, std::nullopt}, 1, best, 0));
  // A margin keeps a trial whose bound is just under the incumbent.
  EXPECT_FALSE(should_stop_early(EarlyStopRule{1, 0.2}, spec, 100, {2.0, std::nullopt, std::nullopt}, 1, best, 90));
  // Gated out (C = 0): stopped right after the accuracy, whatever its speed.
  EXPECT_TRUE(should_stop_early(EarlyStopRule{0, 0.0}, spec, 90, {std::nullopt, std::nullopt, std::nullopt}, 0, best, 1));
}

}  // namespace
}  // namespace soartune::search
