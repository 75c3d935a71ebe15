#include "search/calibration.h"

#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

// Synthetic submissions: official log S_N = a[t] + b[t] * log(local duration) + small noise; official accuracy =
// local + offset + N(0, acc_sigma^2).
struct Truth {
  std::array<double, kTiers> a = {std::log(100.0 * 0.8), std::log(100.0 * 2.5), std::log(100.0 * 6.0)};
  std::array<double, kTiers> b = {-0.9, -1.1, -1.0};
  double offset = 1.5;
  double acc_sigma = 1.0;
};

std::vector<CalibrationSample> synthetic(const Truth& truth, int n, uint64_t seed, double log_noise = 0.01) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> unit(0, 1);
  std::uniform_real_distribution<double> spread(0, 1);
  std::vector<CalibrationSample> out;
  for (int i = 0; i < n; ++i) {
    CalibrationSample s;
    const double speedup = 0.5 + spread(rng);   // local durations vary by 3x
    const std::array<double, kTiers> base = {1.0, 3.0, 7.0};
    for (int t = 0; t < kTiers; ++t) {
      s.local_duration_s[t] = base[t] * speedup;
      s.official_tier_score[t] =
          std::exp(truth.a[t] + truth.b[t] * std::log(s.local_duration_s[t]) + log_noise * unit(rng));
    }
    s.local_accuracy_pct = 97.0 + 2.5 * spread(rng);
    s.official_accuracy_pct = s.local_accuracy_pct + truth.offset + truth.acc_sigma * unit(rng);
    out.push_back(s);
  }
  return out;
}

TEST(Calibration, RecoversSlopeAndOffset) {
  const Truth truth;
  auto c = fit_calibration(synthetic(truth, 30, 7));
  ASSERT_TRUE(c.ok()) << c.status().message;
  for (int t = 0; t < kTiers; ++t) {
    ASSERT_TRUE(c.value().tier[t].has_value()) << t;
    const TierMapping& m = *c.value().tier[t];
    EXPECT_TRUE(m.slope_fitted);
    EXPECT_EQ(m.n, 30);
    EXPECT_NEAR(m.slope, truth.b[t], 0.05) << kTierNames[t];
    EXPECT_NEAR(m.intercept, truth.a[t], 0.1) << kTierNames[t];
    EXPECT_GT(m.r2, 0.95);
    EXPECT_LT(m.residual_sigma, 0.03);
  }
  EXPECT_EQ(c.value().n_accuracy, 30);
  EXPECT_NEAR(c.value().accuracy_offset_raw_pct, truth.offset, 0.5);
  EXPECT_NEAR(c.value().accuracy_offset_pct, c.value().accuracy_offset_raw_pct * 30.0 / 31.0, 1e-9);
  ASSERT_TRUE(c.value().accuracy_sigma_pct.has_value());
  EXPECT_NEAR(*c.value().accuracy_sigma_pct, truth.acc_sigma, 0.5);
  EXPECT_NEAR(c.value().sigma_pct(), *c.value().accuracy_sigma_pct, 1e-12);
  EXPECT_EQ(c.value().sigma_pct(3.0), 3.0);   // a requested sigma wins
}

TEST(Calibration, AnOutlierBarelyMovesTheFit) {
  const Truth truth;
  auto clean = synthetic(truth, 12, 11);
  auto dirty = clean;
  dirty[3].official_tier_score[0] *= 3.0;          // a wildly wrong official tier score
  dirty[5].official_accuracy_pct -= 20.0;          // and a wildly wrong accuracy
  auto c0 = fit_calibration(clean), c1 = fit_calibration(dirty);
  ASSERT_TRUE(c0.ok() && c1.ok());
  EXPECT_NEAR(c1.value().tier[0]->slope, c0.value().tier[0]->slope, 0.1);
  EXPECT_NEAR(c1.value().tier[0]->intercept, c0.value().tier[0]->intercept, 0.15);
  EXPECT_NEAR(c1.value().tier[0]->slope, truth.b[0], 0.1);
  EXPECT_NEAR(c1.value().accuracy_offset_raw_pct, c0.value().accuracy_offset_raw_pct, 0.5);
  // A least-squares mean would have moved by 20/12 = 1.7 points.
  EXPECT_NEAR(c1.value().accuracy_offset_raw_pct, truth.offset, 0.8);
}

TEST(Calibration, FewSamplesHoldTheSlopeAndTheDefaultSigma) {
  const Truth truth;
  auto c = fit_calibration(synthetic(truth, 2, 3));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.value().tier[1].has_value());
  EXPECT_FALSE(c.value().tier[1]->slope_fitted);
  EXPECT_EQ(c.value().tier[1]->slope, -1.0);
  EXPECT_FALSE(c.value().accuracy_sigma_pct.has_value());
  EXPECT_EQ(c.value().sigma_pct(), kDefaultAccuracySigmaPct);
  const std::string text = c.value().describe();
  EXPECT_NE(text.find("held at -1"), std::string::npos) << text;
  EXPECT_NE(text.find("default"), std::string::npos) << text;
}

TEST(Calibration, EmptyAndFailedSamplesGiveAnEmptyCalibration) {
  auto empty = fit_calibration({});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty.value().empty());
  EXPECT_EQ(empty.value().sigma_pct(), 2.0);
  CalibrationSample failed;
  failed.official_failed = true;
  failed.local_duration_s = {1, 2, 3};
  failed.official_tier_score = {50, 50, 50};
  auto c = fit_calibration({failed});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c.value().empty());
  Prediction p;
  p.log_duration_mean = {0.1, 0.2, 0.3};
  p.accuracy_mean_pct = 99;
  const Prediction q = c.value().apply(p, {1, 1, 1});
  EXPECT_EQ(q.log_duration_mean, p.log_duration_mean);
  EXPECT_EQ(q.accuracy_mean_pct, 99);
}

TEST(Calibration, ApplyGivesTheOfficialScoreAgainstTheLocalReference) {
  const Truth truth;
  auto c = fit_calibration(synthetic(truth, 20, 5));
  ASSERT_TRUE(c.ok());
  Prediction p;
  p.log_duration_mean = {std::log(0.9), std::log(2.8), std::log(6.5)};
  p.log_duration_std = {0.1, 0.1, 0.1};
  p.accuracy_mean_pct = 98.0;
  const std::array<double, kTiers> ref = {0.7, 2.0, 5.0};
  const Prediction q = c.value().apply(p, ref);
  for (int t = 0; t < kTiers; ++t) {
    const double via_reference = 100.0 * ref[t] / std::exp(q.log_duration_mean[t]);
    const double official = std::exp(c.value().tier[t]->intercept + c.value().tier[t]->slope * p.log_duration_mean[t]);
    EXPECT_NEAR(via_reference, official, 1e-9 * official);
    EXPECT_NEAR(*c.value().official_tier_score(t, p.log_duration_mean[t]), std::min(100.0, official), 1e-9);
    EXPECT_GE(q.log_duration_std[t], std::fabs(c.value().tier[t]->slope) * 0.1 - 1e-12);
  }
  EXPECT_NEAR(q.accuracy_mean_pct, 98.0 + c.value().accuracy_offset_pct, 1e-12);
}

TEST(Calibration, RejectsNonFiniteValuesNamingTheField) {
  CalibrationSample s;
  s.local_duration_s = {1, 2, 3};
  s.official_tier_score = {50, std::numeric_limits<double>::quiet_NaN(), 50};
  auto c = fit_calibration({s});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code, Code::kInvalidArgument);
  EXPECT_NE(c.status().message.find("samples[0].official_tier_score.c8"), std::string::npos) << c.status().message;
}

}  // namespace
}  // namespace soartune::search
