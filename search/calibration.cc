#include "search/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace soartune::search {
namespace {

constexpr double kMadToSigma = 1.4826;   // MAD -> sigma for a normal distribution
// Slopes outside this range are implausible for "official duration vs local duration" and are clamped.
constexpr double kSlopeMin = -2.0, kSlopeMax = -0.25;
// The local log durations must spread at least this much (about 5% in duration) to fit a slope.
constexpr double kMinLogSpreadForSlope = 0.05;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + mid);
  return 0.5 * (lo + hi);
}

double mad(const std::vector<double>& v) {
  const double m = median(v);
  std::vector<double> d;
  d.reserve(v.size());
  for (double x : v) d.push_back(std::fabs(x - m));
  return median(d);
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

TierMapping fit_tier(const std::vector<double>& x, const std::vector<double>& y) {
  TierMapping m;
  m.n = static_cast<int>(x.size());
  const auto [xmin, xmax] = std::minmax_element(x.begin(), x.end());
  if (m.n >= kMinSamplesForSlope && *xmax - *xmin >= kMinLogSpreadForSlope) {
    std::vector<double> slopes;
    for (size_t i = 0; i < x.size(); ++i)
      for (size_t j = i + 1; j < x.size(); ++j)
        if (std::fabs(x[j] - x[i]) > 1e-9) slopes.push_back((y[j] - y[i]) / (x[j] - x[i]));
    if (!slopes.empty()) {
      m.slope = std::clamp(median(slopes), kSlopeMin, kSlopeMax);
      m.slope_fitted = true;
    }
  }
  std::vector<double> intercepts;
  for (size_t i = 0; i < x.size(); ++i) intercepts.push_back(y[i] - m.slope * x[i]);
  m.intercept = median(intercepts);
  std::vector<double> res;
  double ybar = 0;
  for (double v : y) ybar += v / static_cast<double>(y.size());
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = y[i] - m.intercept - m.slope * x[i];
    res.push_back(r);
    ss_res += r * r;
    ss_tot += (y[i] - ybar) * (y[i] - ybar);
  }
  if (m.n >= kMinSamplesForSlope) m.residual_sigma = kMadToSigma * mad(res);
  m.r2 = ss_tot > 1e-12 ? 1.0 - ss_res / ss_tot : 0.0;
  return m;
}

}  // namespace

bool Calibration::empty() const {
  for (const auto& t : tier)
    if (t) return false;
  return n_accuracy == 0;
}

double Calibration::sigma_pct(double requested) const {
  if (requested > 0) return requested;
  if (accuracy_sigma_pct) return *accuracy_sigma_pct;
  return kDefaultAccuracySigmaPct;
}

std::optional<double> Calibration::official_tier_score(int t, double local_log_duration) const {
  if (t < 0 || t >= kTiers || !tier[t]) return std::nullopt;
  return std::min(100.0, std::exp(tier[t]->intercept + tier[t]->slope * local_log_duration));
}

Prediction Calibration::apply(const Prediction& p, const std::array<double, kTiers>& reference_s) const {
  Prediction out = p;
  for (int t = 0; t < kTiers; ++t) {
    if (!tier[t] || !(reference_s[t] > 0)) continue;
    const TierMapping& m = *tier[t];
    // official S = exp(a + b x); the equivalent duration against the reference: 100 * ref / S.
    out.log_duration_mean[t] = std::log(100.0 * reference_s[t]) - m.intercept - m.slope * p.log_duration_mean[t];
    out.log_duration_std[t] = std::hypot(m.slope * p.log_duration_std[t], m.residual_sigma);
  }
  out.accuracy_mean_pct = p.accuracy_mean_pct + accuracy_offset_pct;
  return out;
}

std::string Calibration::describe() const {
  if (empty())
    return "no official results recorded: local scores against the reference durations, accuracy offset 0, "
           "accuracy noise sigma " + fmt("%.2f", kDefaultAccuracySigmaPct) + " points (default)";
  std::ostringstream os;
  os << "local-to-official calibration:\n";
  for (int t = 0; t < kTiers; ++t) {
    os << "  " << kTierNames[t] << ": ";
    if (!tier[t]) {
      os << "not calibrated (no official tier scores)\n";
      continue;
    }
    const TierMapping& m = *tier[t];
    os << "log S = " << fmt("%.3f", m.intercept) << " " << (m.slope < 0 ? "- " : "+ ")
       << fmt("%.3f", std::fabs(m.slope)) << " * log(local duration s); n " << m.n;
    if (m.slope_fitted)
      os << ", Theil-Sen slope";
    else
      os << ", slope held at -1 (needs " << kMinSamplesForSlope << " results with local durations 5% apart)";
    if (m.n >= kMinSamplesForSlope)
      os << ", residual sigma " << fmt("%.3f", m.residual_sigma) << " (log), R^2 " << fmt("%.2f", m.r2);
    os << "\n";
  }
  os << "  accuracy: official = local " << (accuracy_offset_pct < 0 ? "- " : "+ ")
     << fmt("%.2f", std::fabs(accuracy_offset_pct)) << " points (median " << fmt("%+.2f", accuracy_offset_raw_pct)
     << " over " << n_accuracy << ", shrunk by n/(n+1)); residual MAD " << fmt("%.2f", accuracy_residual_mad_pct);
  if (accuracy_sigma_pct)
    os << "; noise sigma " << fmt("%.2f", *accuracy_sigma_pct) << " points (learned)";
  else
    os << "; noise sigma " << fmt("%.2f", kDefaultAccuracySigmaPct) << " points (default until "
       << kMinSamplesForSigma << " results)";
  return os.str();
}

Result<Calibration> fit_calibration(const std::vector<CalibrationSample>& samples) {
  std::array<std::vector<double>, kTiers> xs, ys;
  std::vector<double> acc_diff;
  for (size_t i = 0; i < samples.size(); ++i) {
    const CalibrationSample& s = samples[i];
    const std::string field = "samples[" + std::to_string(i) + "].";
    for (int t = 0; t < kTiers; ++t) {
      if (!std::isfinite(s.local_duration_s[t]))
        return Status::Invalid(field + "local_duration_s." + kTierNames[t] + ": not a finite number");
      if (!std::isfinite(s.official_tier_score[t]))
        return Status::Invalid(field + "official_tier_score." + kTierNames[t] + ": not a finite number");
    }
    if (!std::isfinite(s.local_accuracy_pct)) return Status::Invalid(field + "local_accuracy_pct: not a finite number");
    if (!std::isfinite(s.official_accuracy_pct))
      return Status::Invalid(field + "official_accuracy_pct: not a finite number");
    if (s.official_failed) continue;
    for (int t = 0; t < kTiers; ++t) {
      if (s.local_duration_s[t] <= 0 || s.official_tier_score[t] <= 0) continue;
      xs[t].push_back(std::log(s.local_duration_s[t]));
      ys[t].push_back(std::log(s.official_tier_score[t]));
    }
    if (s.local_accuracy_pct > 0 && s.official_accuracy_pct > 0)
      acc_diff.push_back(s.official_accuracy_pct - s.local_accuracy_pct);
  }
  Calibration c;
  for (int t = 0; t < kTiers; ++t)
    if (!xs[t].empty()) c.tier[t] = fit_tier(xs[t], ys[t]);
  c.n_accuracy = static_cast<int>(acc_diff.size());
  if (c.n_accuracy > 0) {
    c.accuracy_offset_raw_pct = median(acc_diff);
    const double n = c.n_accuracy;
    c.accuracy_offset_pct = c.accuracy_offset_raw_pct * n / (n + 1.0);
    c.accuracy_residual_mad_pct = mad(acc_diff);
    if (c.n_accuracy >= kMinSamplesForSigma)
      c.accuracy_sigma_pct = std::max(kMinSigmaPct, kMadToSigma * c.accuracy_residual_mad_pct);
  }
  return c;
}

}  // namespace soartune::search
