#include "search/failure_model.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

double truth(double x0, double x1) { return 1 / (1 + std::exp(-10 * (x0 - 0.6))) * (0.3 + 0.7 * x1); }

TEST(FailureModel, CalibratedOnSyntheticData) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  const int n = 600;
  Eigen::MatrixXd X(n, 2);
  std::vector<bool> failed(n);
  for (int i = 0; i < n; ++i) {
    X(i, 0) = u(rng);
    X(i, 1) = u(rng);
    failed[static_cast<size_t>(i)] = u(rng) < truth(X(i, 0), X(i, 1));
  }
  FailureModel m;
  m.fit(X, failed);
  // Reliability on fresh draws: within each predicted-probability bin, the observed failure frequency is
  // close to the mean prediction.
  const int bins = 5, fresh = 4000;
  std::vector<double> pred_sum(bins), obs_sum(bins), count(bins);
  double abs_err = 0;
  for (int i = 0; i < fresh; ++i) {
    const Eigen::Vector2d x(u(rng), u(rng));
    const double p = m.probability(x);
    const bool f = u(rng) < truth(x[0], x[1]);
    const int b = std::min(bins - 1, static_cast<int>(p * bins));
    pred_sum[b] += p;
    obs_sum[b] += f;
    count[b] += 1;
    abs_err += std::abs(p - truth(x[0], x[1]));
  }
  EXPECT_LT(abs_err / fresh, 0.08);
  for (int b = 0; b < bins; ++b) {
    if (count[b] < 200) continue;
    EXPECT_NEAR(obs_sum[b] / count[b], pred_sum[b] / count[b], 0.07) << "bin " << b;
  }
}

TEST(FailureModel, NoFailuresGivesSmallBaseRate) {
  Eigen::MatrixXd X = Eigen::MatrixXd::Random(20, 3).cwiseAbs();
  FailureModel m;
  m.fit(X, std::vector<bool>(20, false));
  const double p = m.probability(Eigen::Vector3d(0.5, 0.5, 0.5));
  EXPECT_GT(p, 0.0);
  EXPECT_LT(p, 0.05);
}

TEST(FailureModel, FailingRegionIsLocal) {
  // Failures exactly where x0 > 0.8, among 60 points on a grid.
  Eigen::MatrixXd X(60, 2);
  std::vector<bool> failed(60);
  for (int i = 0; i < 60; ++i) {
    X(i, 0) = (i % 10) / 9.0;
    X(i, 1) = (i / 10) / 5.0;
    failed[static_cast<size_t>(i)] = X(i, 0) > 0.8;
  }
  FailureModel m;
  m.fit(X, failed);
  const double inside = m.probability(Eigen::Vector2d(1.0, 0.4));
  const double edge = m.probability(Eigen::Vector2d(0.95, 0.5));
  const double outside = m.probability(Eigen::Vector2d(0.2, 0.5));
  EXPECT_GT(inside, 0.5);   // a smoother, not a classifier: the boundary is blurred by one bandwidth
  EXPECT_GT(edge, 0.4);
  EXPECT_LT(outside, 0.1);
  EXPECT_GT(edge, 5 * outside);
}

// The kind decides whether a failure teaches the model something about the config: out-of-memory failures in
// one corner raise the probability there; the same trials failed by a daemon restart leave it at the base rate.
TEST(FailureModel, ReadsTheFailureKind) {
  const int n = 40;
  Eigen::MatrixXd X(n, 1);
  std::vector<FailureKind> oom(n, FailureKind::kNone), restart(n, FailureKind::kNone);
  for (int i = 0; i < n; ++i) {
    X(i, 0) = static_cast<double>(i) / (n - 1);
    if (X(i, 0) > 0.75) {
      oom[static_cast<size_t>(i)] = FailureKind::kOutOfMemory;
      restart[static_cast<size_t>(i)] = FailureKind::kRestart;
    }
  }
  FailureModel a, b;
  a.fit(X, oom);
  b.fit(X, restart);
  const Eigen::VectorXd corner = Eigen::VectorXd::Constant(1, 0.95);
  EXPECT_GT(a.probability(corner), 0.7);
  EXPECT_LT(b.probability(corner), 0.1);
  EXPECT_LT(b.base_rate(), 0.05);
}

}  // namespace
}  // namespace soartune::search
