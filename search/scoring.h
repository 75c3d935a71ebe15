// The race's score: final = (S1*w1 + S8*w8 + Sinf*winf) * C, S_N = 100 * D_best / D_N, C a step function of the
// relative accuracy (capped at 100%). Weights, gate tiers and per-tier reference durations are configurable.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/status.h"

namespace soartune::search {

inline constexpr int kTiers = 3;                       // c1, c8, cinf
inline constexpr std::array<const char*, kTiers> kTierNames = {"c1", "c8", "cinf"};
inline constexpr std::array<int, kTiers> kTierConcurrency = {1, 8, 0};   // 0 = unlimited

struct GateTier {
  double above_pct;   // relative accuracy strictly above this ...
  double c;           // ... gives this multiplier
};

struct ScoringSpec {
  std::array<double, kTiers> weights = {0.40, 0.30, 0.30};
  // Sorted by above_pct descending; below every tier C = 0. The race: >99 -> 1, >98 -> 0.96, >97 -> 0.92.
  std::vector<GateTier> gate = {{99.0, 1.0}, {98.0, 0.96}, {97.0, 0.92}};
  // Optional user targets (seconds) per tier; when absent, durations are relative to the best seen.
  std::array<std::optional<double>, kTiers> target_s;

  // Parses `scoring:` (weights, gate, targets); errors name the field.
  static Result<ScoringSpec> parse(const YAML::Node& node, const std::string& field = "scoring");

  double gate_multiplier(double relative_accuracy_pct) const;   // C
  // Gate levels from best to worst, ending with 0: {1.0, 0.96, 0.92, 0}.
  std::vector<double> gate_levels() const;
};

struct TrialMetrics {
  std::array<double, kTiers> duration_s{};
  double relative_accuracy_pct = 0;
};

struct Score {
  std::array<double, kTiers> tier_score{};   // S1, S8, Sinf
  double speed = 0;                          // weighted sum before the gate
  double gate = 0;                           // C
  double final_score = 0;                    // speed * C
};

// Per-tier reference durations: the user's targets where given, else the best (smallest) among `observed`.
std::array<double, kTiers> reference_durations(const ScoringSpec& spec, const std::vector<TrialMetrics>& observed);
Score score(const ScoringSpec& spec, const TrialMetrics& m, const std::array<double, kTiers>& reference_s);
// The formula itself, on tier scores and a multiplier already known (an official result): the weighted sum of
// S1, S8, Sinf times C. score() uses it; so does everything else that needs a final score.
double final_score(const ScoringSpec& spec, const std::array<double, kTiers>& tier_score, double gate);

}  // namespace soartune::search
