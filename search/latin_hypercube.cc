#include "search/latin_hypercube.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

namespace soartune::search {

double min_pairwise_distance(const std::vector<std::vector<double>>& points) {
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < points.size(); ++i) {
    for (size_t j = i + 1; j < points.size(); ++j) {
      double d2 = 0;
      for (size_t k = 0; k < points[i].size(); ++k) d2 += (points[i][k] - points[j][k]) * (points[i][k] - points[j][k]);
      best = std::min(best, std::sqrt(d2));
    }
  }
  return best;
}

std::vector<std::vector<double>> latin_hypercube(int n, int dims, uint64_t seed, int tries) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::vector<double>> best;
  double best_distance = -1;
  std::vector<int> perm(static_cast<size_t>(std::max(n, 0)));
  for (int t = 0; t < std::max(tries, 1); ++t) {
    std::vector<std::vector<double>> pts(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(dims)));
    for (int k = 0; k < dims; ++k) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int i = 0; i < n; ++i) pts[i][k] = (perm[i] + unit(rng)) / n;
    }
    const double d = n > 1 && tries > 1 ? min_pairwise_distance(pts) : 0;
    if (d > best_distance) {
      best_distance = d;
      best = std::move(pts);
    }
  }
  return best;
}

}  // namespace soartune::search
