// The submission planner: which k configs to spend today's official submissions on.
//
// The objective is the expected value of the day's best official score, E[max over the chosen set], not the
// sum of expected scores: two bold configs that fail the gate together are worth less than a bold one plus a
// safe one. Monte Carlo over joint draws with common random numbers (one seed, the same draws for every
// candidate set):
//   - per tier, the local log duration ~ N(mean, std) from the Prediction, mapped to an official tier score
//     by the calibration (else S_N = 100 * reference / duration);
//   - the config's true accuracy ~ N(mean + calibration offset, std), and each submission's official
//     accuracy = that + N(0, sigma^2) (the official evaluation's own noise), capped at 100; C = gate step;
//   - failure with probability p_failure (score 0).
// Prediction errors of similar configs are correlated: the model errors of candidates i and j have
// correlation similarity_decay^(number of knobs that differ), so near-identical configs rise and fall
// together. The set is found exactly when the number of k-subsets is small, else greedily by marginal gain.
// Deterministic given the seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "search/calibration.h"
#include "search/prediction.h"
#include "search/scoring.h"

namespace soartune::search {

struct PlanCandidate {
  int64_t trial = -1;              // the caller's id for the config (the trial number)
  Prediction prediction;           // local prediction (calibration is applied by the planner)
};

struct PlanOptions {
  int draws = 4000;                // Monte Carlo joint draws
  uint64_t seed = 1;
  // Correlation of the model errors of two candidates: similarity_decay ^ (knobs that differ). 0: independent.
  double similarity_decay = 0.5;
  // Candidates kept for set search (by expected score alone, plus the safest and the boldest).
  int max_candidates = 40;
  // Exact search over all k-subsets when there are at most this many; else greedy.
  int64_t exact_max_subsets = 20000;
  // The best official final score already recorded today: the day's best cannot fall below it. Passing the
  // race's best so far instead plans for the best score overall (bolder once a good score is in).
  double best_today = 0;
  // A pick whose chance of scoring 0 (P(C = 0) + P(failure)) is at most this is called "safe", else "bold".
  // (With 2 points of official noise even a perfect config reaches P(C = 1) only about 0.69, so "safe" is about
  // not losing the submission rather than about the top tier.)
  double safe_max_p_zero = 0.1;
};

struct PlanPick {
  int64_t trial = -1;
  Config config;
  std::string role;                // "safe" | "bold"
  double predicted_score = 0;      // E[official final score] of this pick alone
  double score_lo = 0, score_hi = 0;   // 10% / 90% quantiles of its official final score
  double speed_mean = 0;           // E[weighted tier score] before the gate
  std::vector<double> p_gate;      // P(C = level) per ScoringSpec::gate_levels() (last = P(C = 0)); from
                                   // accuracy alone, sums to 1
  double p_failure = 0;
  double marginal_value = 0;       // gain in E[day's best] from adding this pick to the earlier ones
  double expected_best_after = 0;  // E[day's best] with this pick and the earlier ones
  int64_t runner_up_trial = -1;    // the best unchosen candidate to put in this pick's place (-1: none)
  double runner_up_marginal = 0;   // the runner-up's gain at this position (given the earlier picks)
  double runner_up_expected_best = 0;  // E[day's best] with the runner-up in place of this pick
  std::string explanation;
};

struct Plan {
  std::vector<PlanPick> picks;     // in order of choice (each pick's marginal value given the earlier ones)
  double expected_best_score = 0;  // E[max(best_today, picks)]
  double expected_best_stderr = 0; // Monte Carlo standard error of it
  double p_all_zero = 0;           // P(every pick scores 0)
  double accuracy_sigma_pct = 0;   // the noise used
  std::string sigma_source;        // "requested" | "learned from N official results" | "default"
  std::string method;              // "exact over N subsets" | "greedy"
  std::string calibration;         // Calibration::describe()
  int candidates_considered = 0;
};

// Chooses up to k picks (fewer when there are fewer candidates). accuracy_sigma_pct <= 0: the calibration's
// learned sigma, else 2 points. reference_s: local reference durations per tier (the scoring targets or the
// best seen; see reference_durations()), used for uncalibrated tiers. Errors: k < 1, no candidates,
// non-positive reference durations, bad options, NaN in a prediction (each naming the field).
Result<Plan> plan(int k, const std::vector<PlanCandidate>& candidates, const ScoringSpec& scoring,
                  const std::array<double, kTiers>& reference_s, double accuracy_sigma_pct,
                  const Calibration& calibration, const PlanOptions& options = {});

// The plan as text for the CLI: one block per pick, then the expected best and the calibration in use.
std::string describe(const Plan& plan);

}  // namespace soartune::search
