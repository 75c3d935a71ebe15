// The one place that knows every strategy: make_strategy (declared with the Strategy interface in strategy.h,
// so callers need only the interface) lives above the strategies, not beside the interface they implement.
#include "search/bayes_strategy.h"
#include "search/random_strategy.h"
#include "search/strategy.h"

namespace soartune::search {

Result<std::unique_ptr<Strategy>> make_strategy(const std::string& name) {
  if (name == "bayes") return make_bayes_strategy();
  if (name == "random") return make_random_strategy();
  return Status::Invalid("strategy: '" + name + "' is not one of bayes, random");
}

}  // namespace soartune::search
