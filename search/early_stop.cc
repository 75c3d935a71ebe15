#include "search/early_stop.h"

#include <algorithm>
#include <cmath>

namespace soartune::search {

double score_upper_bound(const ScoringSpec& spec, double accuracy_pct,
                         const std::array<std::optional<double>, kTiers>& measured_s,
                         const std::array<double, kTiers>& reference_s) {
  std::array<double, kTiers> s{};
  for (int t = 0; t < kTiers; ++t) {
    s[t] = 100.0;
    const std::optional<double>& d = measured_s[t];
    if (d && std::isfinite(*d) && *d > 0 && std::isfinite(reference_s[t]) && reference_s[t] > 0)
      s[t] = 100.0 * std::min(reference_s[t], *d) / *d;
  }
  return final_score(spec, s, spec.gate_multiplier(accuracy_pct));
}

bool should_stop_early(const EarlyStopRule& rule, const ScoringSpec& spec, double accuracy_pct,
                       const std::array<std::optional<double>, kTiers>& measured_s, int tiers_measured,
                       const std::array<double, kTiers>& reference_s, double incumbent_score) {
  if (tiers_measured < rule.after_tiers) return false;
  if (spec.gate_multiplier(accuracy_pct) <= 0) return true;
  if (!(incumbent_score > 0)) return false;
  return score_upper_bound(spec, accuracy_pct, measured_s, reference_s) < incumbent_score * (1.0 - rule.margin);
}

}  // namespace soartune::search
