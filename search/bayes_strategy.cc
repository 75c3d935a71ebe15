#include "search/bayes_strategy.h"

#include <set>

#include "search/encoding.h"
#include "search/latin_hypercube.h"

namespace soartune::search {
namespace {

// First version: reference, a Latin-hypercube design, then space-filling candidates not yet seen.
class BayesStrategy : public Strategy {
 public:
  std::string name() const override { return "bayes"; }

  std::vector<Suggestion> ask(const SearchProblem& problem, const std::vector<Observation>& history,
                              int q) override {
    std::vector<Suggestion> out;
    Encoding enc(problem.space.params());
    std::set<std::string> seen;
    for (const Observation& o : history) seen.insert(config_key(enc.canonical(o.config, problem.reference)));
    if (history.empty() && q > 0) {
      Suggestion s;
      s.config = problem.reference;
      s.strategy = "reference";
      s.note = "reference trial";
      out.push_back(s);
      seen.insert(config_key(enc.canonical(problem.reference, problem.reference)));
    }
    const auto pts = latin_hypercube(256, enc.num_params(), problem.seed, 1);
    for (const auto& u : pts) {
      if (static_cast<int>(out.size()) >= q) break;
      Config c = enc.from_unit(u, problem.reference);
      if (!seen.insert(config_key(c)).second) continue;
      Suggestion s;
      s.config = c;
      s.strategy = "initial-design";
      s.p_gate.assign(problem.scoring.gate.size() + 1, 0.0);
      s.note = "space-filling design point";
      out.push_back(std::move(s));
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_bayes_strategy() { return std::make_unique<BayesStrategy>(); }

}  // namespace soartune::search
