#include "engine/metrics.h"

#include <algorithm>
#include <cmath>

namespace soartune::engine {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (rank - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

Percentiles summarize(const std::vector<double>& values) {
  return {percentile(values, 50), percentile(values, 90), percentile(values, 99)};
}

}  // namespace soartune::engine
