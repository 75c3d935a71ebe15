// Bayesian optimisation of the gated score: GP models of log tier durations and relative accuracy, a failure
// model, expected improvement of the gated score, q parallel suggestions.
#pragma once

#include <memory>

#include "search/strategy.h"

namespace soartune::search {

std::unique_ptr<Strategy> make_bayes_strategy();

}  // namespace soartune::search
