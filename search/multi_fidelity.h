// Multi-fidelity search: cheap screening runs at a fraction of the workload, and asynchronous successive halving
// (ASHA) promoting the promising configs level by level up to the full run.
//
// Levels are workload fractions f_0 < f_1 < ... < f_last = 1 (how a level shortens the workload is the
// daemon's business: daemon/fidelity.h). A rung is the set of configs that completed at one level. Whenever a
// device asks for work, the highest rung with a promotion due is served first: a config is due when it ranks
// in the top floor(n / eta) of its rung's n complete configs, has a positive score there, and has not yet run
// (or started) at a higher level. Only when no promotion is due does the inner strategy propose a new config,
// at the lowest level; once it has none left (the space is screened), the best unpromoted config of the highest
// rung goes up whatever its rank. Rung rankings score durations relative to the best of the same rung (a shortened
// workload's seconds are not comparable with the full run's; user targets are for the full run, so ignored).
//
// The Bayesian models see every level with the fidelity as one more GP input (its own length-scale, learnt
// like the others: bayes_models.h), so low-fidelity runs inform the full-fidelity prediction exactly as much
// as the data says they correlate; the acquisition always predicts the full run, and the incumbent is the best
// full-fidelity score.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "search/strategy.h"

namespace soartune::search {

inline constexpr int kMaxFidelityLevels = 6;
inline constexpr int kMinEta = 2, kMaxEta = 10;

// Levels strictly ascending in (0, 1], at least two, at most kMaxFidelityLevels, the last exactly 1; eta in
// [kMinEta, kMaxEta]. Errors name `field`.levels[i] or `field`.eta.
soartune::Status check_fidelity_levels(const std::vector<double>& levels, int eta, const std::string& field);

// Whether `fidelity` is the full run.
bool is_full_fidelity(double fidelity);
// Index of `fidelity` among `levels` (to 1e-9); -1 when it is none of them.
int fidelity_level_index(const std::vector<double>& levels, double fidelity);
// The GP input of a fidelity: log(f / f_0) / log(1 / f_0), 0 at the lowest level and 1 at the full run
// (a log scale: the levels are usually geometric, f_k = eta^(k - last)).
double fidelity_coordinate(const std::vector<double>& levels, double fidelity);

// The promotion due now (ASHA, highest rung first), or nullopt. The suggestion's strategy is "promotion".
// any_rank: the best config not yet promoted whatever its rank (positive score still required): what runs once
// the inner strategy has no new config left, so the devices keep working up to the full runs.
std::optional<Suggestion> next_promotion(const SearchProblem& problem, const std::vector<Observation>& history,
                                         bool any_rank = false);

// Wraps a strategy: promotions first, new configs from `inner` at the lowest level. Passes straight through
// when the problem has no fidelity levels.
std::unique_ptr<Strategy> with_multi_fidelity(std::unique_ptr<Strategy> inner);

}  // namespace soartune::search
