// Ask/tell. A strategy is stateless between calls: every ask gets the whole history (complete, failed and
// pending trials), so a restarted daemon resumes a job by replaying its trials from the store.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/failure_kind.h"
#include "core/knob_value.h"
#include "search/scoring.h"
#include "search/space.h"

namespace soartune::search {

// kPruned: stopped early by the runner (daemon/early_stop.h), its later tiers never measured. Left out of the
// models (neither a measurement nor a failure to learn), but its config counts as tried: never suggested again.
enum class Outcome { kComplete, kFailed, kPending, kPruned };

struct Observation {
  Config config;
  Outcome outcome = Outcome::kPending;
  TrialMetrics metrics;            // meaningful for kComplete
  FailureKind failure = FailureKind::kUnknown;   // kFailed: why (the failure model weighs it by its kind)
  double fidelity = 1.0;           // the workload fraction it ran at (search/multi_fidelity.h); 1 = the full run
};

struct SearchProblem {
  Space space;
  ScoringSpec scoring;
  Config reference;                // trial 0; also the defaults for inactive / unset knobs
  uint64_t seed = 0;
  // Warm start: trials of earlier jobs on the same model and device, used as prior observations only.
  std::vector<Observation> prior;
  // Multi-fidelity (search/multi_fidelity.h): the fidelity levels, ascending, ending at 1, and the promotion
  // ratio eta. Empty: every trial runs the full workload.
  std::vector<double> fidelity_levels;
  int eta = 3;
};

// Why a config was suggested; stored with the trial and shown by the CLI.
struct Suggestion {
  Config config;
  std::string strategy;            // "reference", "initial-design", "random", "bayes"
  double predicted_score = 0, predicted_score_std = 0, expected_improvement = 0, p_failure = 0;
  std::vector<double> p_gate;      // one per ScoringSpec::gate_levels()
  std::string note;
  double fidelity = 1.0;           // the level to run it at; "promotion": a config re-run one level up
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Up to q new configs, none equal to an observed or pending one; fewer (possibly none) when the space is
  // exhausted. history[0], if present, is the reference trial.
  virtual std::vector<Suggestion> ask(const SearchProblem& problem, const std::vector<Observation>& history,
                                      int q) = 0;
  // Expected improvement relative to the best so far, in percent, for the "EI under x% for k rounds" stop
  // rule; nullopt where the strategy has no such estimate.
  virtual std::optional<double> last_expected_improvement_pct() const { return std::nullopt; }
};

// "random" (uniform sampling, trial 0 the reference) or "bayes" (Bayesian optimisation). Defined in
// strategy_factory.cc, above the strategies: nothing on this floor includes them.
Result<std::unique_ptr<Strategy>> make_strategy(const std::string& name);

}  // namespace soartune::search
