// Expected improvement of the race's gated score. The tier durations are log-normal (GP on log duration),
// the speed score sum_t w_t * 100 * D_ref_t / D_t is a sum of log-normals, matched to one log-normal by its
// first two moments (Fenton-Wilkinson); the gate C is discrete with P(C = c_i) from the accuracy model
// (latent uncertainty plus measurement noise), independent of the durations. Then
//   EI = P(no failure) * sum_i P(C = c_i) * c_i * E[max(speed - best / c_i, 0)],
// every term evaluated in log space so that far-off candidates still rank by how far off they are.
#pragma once

#include <array>
#include <vector>

#include "search/scoring.h"

namespace soartune::search {

struct ModelPrediction {
  std::array<double, kTiers> log_duration_mean{}, log_duration_std{};   // latent, natural log of seconds
  double accuracy_mean_pct = 0, accuracy_std_pct = 0;                    // latent
  double accuracy_noise_pct = 0;                                         // measurement noise sd
  double p_failure = 0;
};

struct Acquisition {
  double log_ei = 0;                 // log of the expected improvement (-inf when no improvement is possible)
  double ei = 0;
  double expected_score = 0;         // E[C * speed], given no failure
  double score_std = 0;
  std::vector<double> p_gate;        // P(C = level) per ScoringSpec::gate_levels()
};

// log Phi(z), accurate far into the lower tail.
double log_normal_cdf(double z);
// log E[max(exp(X) - tau, 0)] for X ~ N(m, s^2), tau > 0.
double log_lognormal_ei(double m, double s, double tau);
// P(C = level) for each gate level (best first, then 0) when the measured accuracy is N(mean, sd^2).
std::vector<double> gate_probabilities(const ScoringSpec& spec, double mean_pct, double sd_pct);
// The gated expected improvement over `best_score`, durations relative to `reference_s`.
Acquisition gated_expected_improvement(const ScoringSpec& spec, const std::array<double, kTiers>& reference_s,
                                       double best_score, const ModelPrediction& p);

}  // namespace soartune::search
