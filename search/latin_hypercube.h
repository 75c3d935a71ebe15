// Space-filling designs on the unit cube: a Latin hypercube (each coordinate hits each of the n strata once),
// the best of several random ones by the smallest pairwise distance (maximin). Deterministic for a seed.
#pragma once

#include <cstdint>
#include <vector>

namespace soartune::search {

// n points in [0, 1)^dims; `tries` Latin hypercubes are drawn and the maximin one kept.
std::vector<std::vector<double>> latin_hypercube(int n, int dims, uint64_t seed, int tries = 16);

// Smallest Euclidean distance between two points of `points` (infinity below two points).
double min_pairwise_distance(const std::vector<std::vector<double>>& points);

}  // namespace soartune::search
