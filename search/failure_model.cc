#include "search/failure_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace soartune::search {

void FailureModel::fit(const Eigen::MatrixXd& X, const std::vector<bool>& failed) {
  X_ = X;
  const int n = static_cast<int>(X.rows());
  y_.resize(n);
  double nf = 0;
  for (int i = 0; i < n; ++i) {
    y_[i] = failed[static_cast<size_t>(i)] ? 1.0 : 0.0;
    nf += y_[i];
  }
  // Jeffreys-like base rate, so "no failure yet" is small but not zero.
  base_rate_ = (nf + 0.5) / (n + 1.0);
  const double scale = std::sqrt(std::max<double>(1, static_cast<double>(X.cols())));
  bandwidth_ = 0.15 * scale;
  if (n < 4 || nf == 0 || nf == n) return;
  double best = -std::numeric_limits<double>::infinity();
  // Leave-one-out over at most 96 evenly spaced trials: enough to choose among nine bandwidths.
  const int stride = std::max(1, (n + 95) / 96);
  std::vector<int> held;
  for (int i = 0; i < n; i += stride) held.push_back(i);
  Eigen::MatrixXd d2(static_cast<Eigen::Index>(held.size()), n);
  for (size_t k = 0; k < held.size(); ++k) {
    d2.row(static_cast<Eigen::Index>(k)) = (X.rowwise() - X.row(held[k])).rowwise().squaredNorm().transpose();
  }
  for (double f : {0.03, 0.05, 0.08, 0.12, 0.18, 0.27, 0.4, 0.6, 1.0}) {
    const double h = f * scale;
    double ll = 0;
    for (size_t k = 0; k < held.size(); ++k) {
      const int i = held[k];
      Eigen::ArrayXd w = (-0.5 * d2.row(static_cast<Eigen::Index>(k)).array() / (h * h)).exp().transpose();
      w[i] = 0;
      const double a = prior_strength_ * base_rate_ + (w * y_.array()).sum();
      const double b = prior_strength_ * (1 - base_rate_) + (w * (1 - y_.array())).sum();
      const double p = std::clamp(a / (a + b), 1e-6, 1 - 1e-6);
      ll += y_[i] > 0.5 ? std::log(p) : std::log1p(-p);
    }
    if (ll > best) {
      best = ll;
      bandwidth_ = h;
    }
  }
}

void FailureModel::fit(const Eigen::MatrixXd& X, const std::vector<FailureKind>& outcome) {
  std::vector<Eigen::Index> rows;
  std::vector<bool> failed;
  for (size_t i = 0; i < outcome.size() && static_cast<Eigen::Index>(i) < X.rows(); ++i) {
    if (outcome[i] != FailureKind::kNone && !is_about_the_config(outcome[i])) continue;
    rows.push_back(static_cast<Eigen::Index>(i));
    failed.push_back(outcome[i] != FailureKind::kNone);
  }
  Eigen::MatrixXd kept(static_cast<Eigen::Index>(rows.size()), X.cols());
  for (size_t k = 0; k < rows.size(); ++k) kept.row(static_cast<Eigen::Index>(k)) = X.row(rows[k]);
  fit(kept, failed);
}

double FailureModel::estimate(const Eigen::VectorXd& x, double h, int skip) const {
  double a = prior_strength_ * base_rate_, b = prior_strength_ * (1 - base_rate_);
  if (X_.rows() > 0) {
    const Eigen::ArrayXd d2 = (X_.rowwise() - x.transpose()).rowwise().squaredNorm().array();
    Eigen::ArrayXd w = (-0.5 * d2 / (h * h)).exp();
    if (skip >= 0) w[skip] = 0;
    a += (w * y_.array()).sum();
    b += (w * (1 - y_.array())).sum();
  }
  return a / (a + b);
}

double FailureModel::probability(const Eigen::VectorXd& x) const { return estimate(x, bandwidth_, -1); }

}  // namespace soartune::search
