// What the search's models predict for one config: the input of the submission planner. Durations are
// log-normal (the GP models log duration), accuracy normal (before the official evaluation's own noise).
#pragma once

#include <array>
#include <vector>

#include "core/knob_value.h"
#include "search/scoring.h"
#include "search/strategy.h"

namespace soartune::search {

struct Prediction {
  Config config;
  std::array<double, kTiers> log_duration_mean{}, log_duration_std{};   // natural log of seconds
  double accuracy_mean_pct = 0, accuracy_std_pct = 0;                    // relative accuracy, percent
  double p_failure = 0;
};

// Fits the search's models to `history` (and problem.prior) and predicts each candidate. A candidate that was
// observed COMPLETE gets its measured values with the models' noise as the spread. Implemented by the
// Bayesian search (search/bayes_*.cc).
std::vector<Prediction> predict(const SearchProblem& problem, const std::vector<Observation>& history,
                                const std::vector<Config>& candidates);

}  // namespace soartune::search
