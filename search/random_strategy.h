// Uniform random search: trial 0 is the reference config, then uniform samples of the space, never repeating
// an observed or pending config.
#pragma once

#include <memory>

#include "search/strategy.h"

namespace soartune::search {

std::unique_ptr<Strategy> make_random_strategy();

}  // namespace soartune::search
