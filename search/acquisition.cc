#include "search/acquisition.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace soartune::search {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = std::max(a, b);
  return m + std::log1p(std::exp(std::min(a, b) - m));
}

// log(1 - exp(x)) for x <= 0.
double log1mexp(double x) {
  if (x >= 0) return kNegInf;
  return x > -0.6931471805599453 ? std::log(-std::expm1(x)) : std::log1p(-std::exp(x));
}

// log(phi(z) + z Phi(z)): log of the standard normal expected improvement h(z).
double log_h(double z) {
  if (z > -25) {
    const double phi = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
    const double v = phi + z * 0.5 * std::erfc(-z / std::sqrt(2.0));
    if (v > 1e-300) return std::log(v);
  }
  // Lower tail: h(z) ~ phi(z) / z^2 * (1 - 3/z^2 + 15/z^4).
  return -0.5 * z * z - 0.5 * std::log(2 * M_PI) - 2 * std::log(-z) + std::log1p(-3 / (z * z) + 15 / (z * z * z * z));
}

}  // namespace

double log_normal_cdf(double z) {
  if (z > -30) return std::log(0.5 * std::erfc(-z / std::sqrt(2.0)));
  // Asymptotic series of the Mills ratio.
  const double z2 = z * z;
  return -0.5 * z2 - std::log(-z) - 0.5 * std::log(2 * M_PI) + std::log1p(-1 / z2 + 3 / (z2 * z2) - 15 / (z2 * z2 * z2));
}

double log_lognormal_ei(double m, double s, double tau) {
  const double log_tau = std::log(tau);
  if (!(s > 1e-9)) {
    const double v = std::exp(m) - tau;
    return v > 0 ? std::log(v) : kNegInf;
  }
  const double z = (m - log_tau) / s;
  // E = tau * (exp(z s + s^2/2) Phi(z + s) - Phi(z)).
  const double log_a = z * s + 0.5 * s * s + log_normal_cdf(z + s);
  const double log_b = log_normal_cdf(z);
  const double diff = log_b - log_a;
  if (diff < -1e-6) return log_tau + log_a + log1mexp(diff);
  // The two terms nearly cancel (small s): expand to first order in s, E ~ tau * s * h(z).
  return log_tau + std::log(s) + log_h(z);
}

std::vector<double> gate_probabilities(const ScoringSpec& spec, double mean_pct, double sd_pct) {
  std::vector<GateTier> gate = spec.gate;
  std::sort(gate.begin(), gate.end(), [](const GateTier& a, const GateTier& b) { return a.above_pct > b.above_pct; });
  auto above = [&](double t) {   // P(A > t)
    if (!(sd_pct > 1e-12)) return mean_pct > t ? 1.0 : 0.0;
    return 0.5 * std::erfc((t - mean_pct) / (sd_pct * std::sqrt(2.0)));
  };
  std::vector<double> p;
  double prev = 0;   // P(A > previous, higher threshold)
  for (const GateTier& g : gate) {
    const double a = above(g.above_pct);
    p.push_back(std::max(0.0, a - prev));
    prev = a;
  }
  p.push_back(std::max(0.0, 1 - prev));
  return p;
}

Acquisition gated_expected_improvement(const ScoringSpec& spec, const std::array<double, kTiers>& reference_s,
                                       double best_score, const ModelPrediction& p) {
  Acquisition a;
  // Moments of speed = sum_t w_t 100 ref_t exp(-L_t), L_t ~ N(mu_t, s_t^2) independent.
  double mean = 0, var = 0;
  for (int t = 0; t < kTiers; ++t) {
    if (spec.weights[t] <= 0) continue;
    const double la = std::log(spec.weights[t] * 100.0 * reference_s[t]) - p.log_duration_mean[t];
    const double s2 = p.log_duration_std[t] * p.log_duration_std[t];
    mean += std::exp(la + 0.5 * s2);
    var += std::exp(2 * la + s2) * std::expm1(s2);
  }
  const double v = mean > 0 ? std::log1p(var / (mean * mean)) : 0;
  const double m = mean > 0 ? std::log(mean) - 0.5 * v : kNegInf;
  const double s = std::sqrt(v);

  const double acc_sd = std::sqrt(p.accuracy_std_pct * p.accuracy_std_pct + p.accuracy_noise_pct * p.accuracy_noise_pct);
  a.p_gate = gate_probabilities(spec, p.accuracy_mean_pct, acc_sd);
  std::vector<double> levels;
  {
    std::vector<GateTier> gate = spec.gate;
    std::sort(gate.begin(), gate.end(), [](const GateTier& x, const GateTier& y) { return x.above_pct > y.above_pct; });
    for (const GateTier& g : gate) levels.push_back(g.c);
    levels.push_back(0.0);
  }
  double ec = 0, ec2 = 0;
  double log_ei = kNegInf;
  for (size_t i = 0; i < levels.size(); ++i) {
    ec += a.p_gate[i] * levels[i];
    ec2 += a.p_gate[i] * levels[i] * levels[i];
    if (levels[i] <= 0 || a.p_gate[i] <= 0 || mean <= 0) continue;
    const double tau = std::max(best_score / levels[i], 1e-12);
    log_ei = log_add(log_ei, std::log(a.p_gate[i]) + std::log(levels[i]) + log_lognormal_ei(m, s, tau));
  }
  const double p_ok = std::clamp(1.0 - p.p_failure, 0.0, 1.0);
  a.log_ei = p_ok > 0 ? log_ei + std::log(p_ok) : kNegInf;
  a.ei = std::exp(a.log_ei);
  a.expected_score = ec * mean;
  const double e_speed2 = var + mean * mean;
  a.score_std = std::sqrt(std::max(0.0, ec2 * e_speed2 - a.expected_score * a.expected_score));
  return a;
}

}  // namespace soartune::search
