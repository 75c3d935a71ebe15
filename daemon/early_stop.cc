#include "daemon/early_stop.h"

#include "daemon/trial_result.h"

namespace soartune::daemon {

namespace {

const TierMeasurement* find_tier(const WorkerProgress& p, const char* name) {
  for (const TierMeasurement& t : p.tiers)
    if (t.tier == name) return &t;
  return nullptr;
}

}  // namespace

std::optional<EarlyStopFacts> early_stop_verdict(const search::EarlyStopRule& rule, const search::ScoringSpec& scoring,
                                                 const WorkerProgress& progress, const ScoredTrials& trials) {
  const TrialRecord* incumbent = trials.best();
  if (!incumbent) return std::nullopt;
  std::array<std::optional<double>, search::kTiers> measured;
  int tiers_measured = 0;
  for (int k = 0; k < search::kTiers; ++k)
    if (const TierMeasurement* t = find_tier(progress, search::kTierNames[k])) {
      measured[k] = t->duration_s;
      ++tiers_measured;
    }
  if (tiers_measured >= search::kTiers) return std::nullopt;   // done measuring: nothing left to save
  const double accuracy = progress.accuracy.relative_pct;
  if (!search::should_stop_early(rule, scoring, accuracy, measured, tiers_measured, trials.reference_durations(),
                                 incumbent->score))
    return std::nullopt;
  return EarlyStopFacts{progress.stage,
                        search::score_upper_bound(scoring, accuracy, measured, trials.reference_durations()),
                        incumbent->score, rule.margin};
}

std::vector<TierRecord> measured_tiers(const WorkerProgress& progress) {
  std::vector<TierRecord> out;
  for (int k = 0; k < search::kTiers; ++k) {
    const TierMeasurement* t = find_tier(progress, search::kTierNames[k]);
    if (t) out.push_back(tier_record(*t));
  }
  return out;
}

}  // namespace soartune::daemon
