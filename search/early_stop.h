// Early stop of a running trial: once its accuracy and its first tiers are measured, is it hopeless?
//
// The worker measures the accuracy first, then the tiers in order (c1, c8, cinf). After the accuracy and the
// first k tiers, the best the trial can still score is its gate C times the weighted tier scores with every
// unmeasured tier at 100 (as fast as the best seen) and every measured one at 100 * min(D_best, D) / D. The rule
// stops the trial when that bound is below the incumbent's score by more than `margin` (a fraction), or when C
// is 0 (the accuracy gate already failed: no speed can help).
//
// The bound is not a proof: a trial that sets a new best on an unmeasured tier lowers every other trial's score
// on it, the incumbent's too, so it could still overtake; measurement noise does the same. How often the rule
// stops a trial that would have become the new best (its false-stop rate) is measured on the replay tables by
// bo_bench --early-stop (docs/PERF.md).
#pragma once

#include <array>
#include <optional>

#include "search/scoring.h"

namespace soartune::search {

struct EarlyStopRule {
  int after_tiers = 1;     // decide once this many tiers are measured (0: right after the accuracy)
  double margin = 0.0;     // stop when bound < incumbent * (1 - margin)
};

// The highest final score a trial can reach given its accuracy and the tiers measured so far (nullopt: not yet
// measured), durations relative to `reference_s` (the best seen, or the targets).
double score_upper_bound(const ScoringSpec& spec, double accuracy_pct,
                         const std::array<std::optional<double>, kTiers>& measured_s,
                         const std::array<double, kTiers>& reference_s);

// Whether to stop the trial now: `tiers_measured` of its tiers are in `measured_s` (the first ones).
bool should_stop_early(const EarlyStopRule& rule, const ScoringSpec& spec, double accuracy_pct,
                       const std::array<std::optional<double>, kTiers>& measured_s, int tiers_measured,
                       const std::array<double, kTiers>& reference_s, double incumbent_score);

}  // namespace soartune::search
