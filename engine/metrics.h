// Latency summaries of a tier: percentiles with linear interpolation between order statistics.
#pragma once

#include <vector>

namespace soartune::engine {

// q in [0, 100]; 0 for an empty sample.
double percentile(std::vector<double> values, double q);

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};
Percentiles summarize(const std::vector<double>& values);

}  // namespace soartune::engine
