// The local-to-official mapping, learned from recorded official submissions.
//
// Durations: per tier, log(official S_N) = intercept + slope * (local log duration). Since S_N = 100 *
// D_best / D_official, a slope of -1 means "official duration proportional to local"; the intercept absorbs
// both the machine ratio and the unknown fastest team's duration. Fitted by Theil-Sen (median of pairwise
// slopes, median intercept) once >= kMinSamplesForSlope samples with distinct local durations exist; with
// fewer, the slope is held at -1 and only the intercept (a median) is learned.
// Accuracy: official relative accuracy = local relative accuracy + offset + noise. The offset is the median
// of (official - local), shrunk towards 0 by n / (n + 1) (a prior offset of 0 with the noise's own spread),
// so one noisy submission does not move plans by its whole error. The noise sigma is learned as
// 1.4826 * MAD of the residuals once >= kMinSamplesForSigma samples exist (floored at kMinSigmaPct);
// before that the caller's default (2 points) holds.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "search/prediction.h"
#include "search/scoring.h"

namespace soartune::search {

inline constexpr int kMinSamplesForSlope = 3;
inline constexpr int kMinSamplesForSigma = 5;
inline constexpr double kMinSigmaPct = 0.25;
inline constexpr double kDefaultAccuracySigmaPct = 2.0;

// One recorded official submission next to what was measured locally for the same config.
struct CalibrationSample {
  std::array<double, kTiers> local_duration_s{};     // measured locally (the submitted trial)
  double local_accuracy_pct = 0;                     // measured locally, relative accuracy
  std::array<double, kTiers> official_tier_score{};  // official S1, S8, Sinf; <= 0: tier missing, skipped
  double official_accuracy_pct = 0;                  // official relative accuracy, percent
  bool official_failed = false;                      // the official run crashed: used for nothing
};

struct TierMapping {
  double intercept = 0, slope = -1;   // log S_official = intercept + slope * log(local duration s)
  bool slope_fitted = false;          // false: slope held at -1 (too few distinct samples)
  int n = 0;
  double residual_sigma = 0;          // 1.4826 * MAD of log-score residuals (0 with n < 3)
  double r2 = 0;                      // 1 - SS_res / SS_tot on log score (0 where undefined)
};

struct Calibration {
  std::array<std::optional<TierMapping>, kTiers> tier;   // nullopt: no official data for the tier
  int n_accuracy = 0;
  double accuracy_offset_pct = 0;                // added to local accuracy predictions
  double accuracy_offset_raw_pct = 0;            // the median before shrinkage
  double accuracy_residual_mad_pct = 0;          // MAD of (official - local - raw offset)
  std::optional<double> accuracy_sigma_pct;      // learned noise sigma (n_accuracy >= kMinSamplesForSigma)

  bool empty() const;
  // The accuracy noise to plan with: `requested` when > 0, else the learned sigma, else the default 2.
  double sigma_pct(double requested = 0) const;
  // Human-readable fit quality: n, slope/intercept, residual spread, R^2 per tier; accuracy offset, MAD, sigma.
  std::string describe() const;

  // Official tier score S_N predicted from a local log duration; nullopt when the tier is not calibrated.
  // Capped at 100 (the fastest team scores 100).
  std::optional<double> official_tier_score(int tier, double local_log_duration) const;

  // The prediction in official terms against local reference durations `reference_s`: each calibrated
  // tier's log duration becomes the official-equivalent log(100 * ref / S_official) (spread scaled by |slope|
  // and widened by the residual sigma); the accuracy mean is shifted by the offset. Uncalibrated tiers and
  // an empty calibration leave the prediction unchanged.
  Prediction apply(const Prediction& p, const std::array<double, kTiers>& reference_s) const;
};

// Fits from recorded submissions. Failed official runs and non-positive values are skipped; an empty input
// gives an empty calibration. Errors (kInvalidArgument naming "samples[i].<field>") on NaN / inf values.
Result<Calibration> fit_calibration(const std::vector<CalibrationSample>& samples);

}  // namespace soartune::search
