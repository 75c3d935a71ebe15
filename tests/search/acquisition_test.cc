#include "search/acquisition.h"

#include <cmath>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

// E[max(exp(X) - tau, 0)], X ~ N(m, s^2), by Simpson's rule over +-12 sd.
double integrate_lognormal_ei(double m, double s, double tau) {
  const int n = 20000;
  const double a = m - 12 * s, b = m + 12 * s, h = (b - a) / n;
  double sum = 0;
  for (int i = 0; i <= n; ++i) {
    const double x = a + i * h;
    const double f = std::max(std::exp(x) - tau, 0.0) * std::exp(-0.5 * std::pow((x - m) / s, 2)) / (s * std::sqrt(2 * M_PI));
    sum += f * (i == 0 || i == n ? 1 : (i % 2 ? 4 : 2));
  }
  return sum * h / 3;
}

TEST(Acquisition, LognormalEiMatchesNumericalIntegration) {
  for (double m : {-0.5, 0.0, 0.3}) {
    for (double s : {0.01, 0.1, 0.5}) {
      for (double tau : {0.6, 1.0, 1.5}) {
        const double expect = integrate_lognormal_ei(m, s, tau);
        if (expect < 1e-250) continue;
        EXPECT_NEAR(std::exp(log_lognormal_ei(m, s, tau)), expect, 1e-6 * std::max(1.0, expect) + 1e-4 * expect)
            << m << " " << s << " " << tau;
      }
    }
  }
}

TEST(Acquisition, LogEiIsFiniteAndOrderedFarInTheTail) {
  // Far below the incumbent EI underflows in linear space; its log still ranks candidates.
  double prev = 0;
  for (int k = 0; k < 6; ++k) {
    const double v = log_lognormal_ei(-3.0 - k, 0.05, 1.0);
    EXPECT_TRUE(std::isfinite(v));
    if (k > 0) EXPECT_LT(v, prev);
    prev = v;
  }
  EXPECT_LT(prev, -1000);
}

TEST(Acquisition, GateProbabilities) {
  ScoringSpec spec;
  const auto p = gate_probabilities(spec, 98.5, 0.5);
  ASSERT_EQ(p.size(), spec.gate_levels().size());
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-12);
  auto phi = [](double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); };
  EXPECT_NEAR(p[0], 1 - phi(1.0), 1e-12);             // > 99
  EXPECT_NEAR(p[1], phi(1.0) - phi(-1.0), 1e-12);     // (98, 99]
  EXPECT_NEAR(p[3], phi(-3.0), 1e-12);                // <= 97
  const auto sure = gate_probabilities(spec, 99.5, 0.0);
  EXPECT_EQ(sure[0], 1.0);
}

TEST(Acquisition, GatedEiOneTierMatchesNumericalIntegration) {
  // One weighted tier: speed = 100 ref exp(-L) is exactly log-normal, so EI has a reference integral.
  ScoringSpec spec;
  spec.weights = {1.0, 0.0, 0.0};
  ModelPrediction p;
  p.log_duration_mean = {std::log(9.0), 0, 0};
  p.log_duration_std = {0.15, 0, 0};
  p.accuracy_mean_pct = 98.7;
  p.accuracy_std_pct = 0.4;
  p.accuracy_noise_pct = 0.3;
  p.p_failure = 0.2;
  const std::array<double, kTiers> ref = {10.0, 1.0, 1.0};
  const double best = 95.0;
  const Acquisition a = gated_expected_improvement(spec, ref, best, p);
  const auto pg = gate_probabilities(spec, 98.7, 0.5);
  const auto levels = spec.gate_levels();
  // speed = exp(X), X = log(100 ref) - L ~ N(log(1000) - log 9, 0.15^2).
  double expect = 0;
  for (size_t i = 0; i < levels.size(); ++i) {
    if (levels[i] <= 0) continue;
    expect += pg[i] * levels[i] * integrate_lognormal_ei(std::log(1000.0 / 9.0), 0.15, best / levels[i]);
  }
  expect *= 0.8;
  EXPECT_NEAR(a.ei, expect, 1e-4 * expect);
  EXPECT_NEAR(a.log_ei, std::log(expect), 1e-4);
  for (size_t i = 0; i < pg.size(); ++i) EXPECT_NEAR(a.p_gate[i], pg[i], 1e-12);
  double ec = 0;
  for (size_t i = 0; i < levels.size(); ++i) ec += pg[i] * levels[i];
  EXPECT_NEAR(a.expected_score, ec * 1000.0 / 9.0 * std::exp(0.5 * 0.15 * 0.15), 1e-9);
}

TEST(Acquisition, GatedEiThreeTiersCloseToMonteCarlo) {
  ScoringSpec spec;
  ModelPrediction p;
  p.log_duration_mean = {std::log(10.5), std::log(7.0), std::log(4.0)};
  p.log_duration_std = {0.08, 0.12, 0.05};
  p.accuracy_mean_pct = 99.3;
  p.accuracy_std_pct = 0.3;
  p.accuracy_noise_pct = 0.2;
  const std::array<double, kTiers> ref = {10.0, 7.5, 4.2};
  const double best = 96.0;
  const Acquisition a = gated_expected_improvement(spec, ref, best, p);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> n(0, 1);
  const double acc_sd = std::sqrt(0.3 * 0.3 + 0.2 * 0.2);
  double sum = 0;
  const int N = 400000;
  for (int i = 0; i < N; ++i) {
    double speed = 0;
    for (int t = 0; t < kTiers; ++t)
      speed += spec.weights[t] * 100 * ref[t] / std::exp(p.log_duration_mean[t] + p.log_duration_std[t] * n(rng));
    sum += std::max(spec.gate_multiplier(p.accuracy_mean_pct + acc_sd * n(rng)) * speed - best, 0.0);
  }
  const double mc = sum / N;
  // Fenton-Wilkinson is an approximation: a few percent here.
  EXPECT_NEAR(a.ei, mc, 0.05 * mc);
}

TEST(Acquisition, FailureAndGateScaleEi) {
  ScoringSpec spec;
  ModelPrediction p;
  p.log_duration_mean = {std::log(9.0), std::log(6.0), std::log(3.5)};
  p.log_duration_std = {0.1, 0.1, 0.1};
  p.accuracy_mean_pct = 99.8;
  p.accuracy_std_pct = 0.1;
  const std::array<double, kTiers> ref = {10.0, 7.0, 4.0};
  const Acquisition safe = gated_expected_improvement(spec, ref, 100.0, p);
  p.p_failure = 0.5;
  const Acquisition risky = gated_expected_improvement(spec, ref, 100.0, p);
  EXPECT_NEAR(risky.ei, 0.5 * safe.ei, 1e-9 * safe.ei);
  p.p_failure = 0;
  p.accuracy_mean_pct = 96.0;   // almost surely C = 0
  const Acquisition gated = gated_expected_improvement(spec, ref, 100.0, p);
  EXPECT_LT(gated.ei, 1e-3 * safe.ei);
  p.p_failure = 1.0;
  EXPECT_EQ(gated_expected_improvement(spec, ref, 100.0, p).ei, 0.0);
}

}  // namespace
}  // namespace soartune::search
