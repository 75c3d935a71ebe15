#include "search/latin_hypercube.h"

#include <set>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

TEST(LatinHypercube, EachStratumOncePerDimension) {
  const int n = 17, d = 5;
  const auto pts = latin_hypercube(n, d, 3);
  ASSERT_EQ(pts.size(), static_cast<size_t>(n));
  for (int k = 0; k < d; ++k) {
    std::set<int> strata;
    for (const auto& p : pts) {
      ASSERT_GE(p[k], 0.0);
      ASSERT_LT(p[k], 1.0);
      strata.insert(static_cast<int>(p[k] * n));
    }
    EXPECT_EQ(strata.size(), static_cast<size_t>(n));
  }
}

TEST(LatinHypercube, DeterministicPerSeed) {
  EXPECT_EQ(latin_hypercube(8, 3, 42), latin_hypercube(8, 3, 42));
  EXPECT_NE(latin_hypercube(8, 3, 42), latin_hypercube(8, 3, 43));
}

TEST(LatinHypercube, MaximinBeatsSingleDraw) {
  double single = 0, best = 0;
  for (uint64_t s = 0; s < 10; ++s) {
    single += min_pairwise_distance(latin_hypercube(10, 4, s, 1));
    best += min_pairwise_distance(latin_hypercube(10, 4, s, 32));
  }
  EXPECT_GT(best, single);
}

}  // namespace
}  // namespace soartune::search
