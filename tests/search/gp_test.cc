#include "search/gp.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

double matern(double r, double sf2) {
  const double s = std::sqrt(5.0) * r;
  return sf2 * (1 + s + s * s / 3) * std::exp(-s);
}

GpHyper hyper(int dims, double ls, double sf2, double sn2, double mean) {
  GpHyper h;
  h.theta.resize(dims + 3);
  h.theta.head(dims).setConstant(std::log(ls));
  h.theta[dims] = std::log(sf2);
  h.theta[dims + 1] = std::log(sn2);
  h.theta[dims + 2] = mean;
  return h;
}

TEST(Gp, KernelClosedForm) {
  Eigen::MatrixXd A(1, 2), B(1, 2);
  A << 0.1, 0.2;
  B << 0.4, 0.6;
  Eigen::VectorXd ls(2);
  ls << 0.5, 2.0;
  const double r = std::sqrt(std::pow(0.3 / 0.5, 2) + std::pow(0.4 / 2.0, 2));
  EXPECT_NEAR(matern52(A, B, ls, 1.7)(0, 0), matern(r, 1.7), 1e-12);
  EXPECT_NEAR(matern52(A, A, ls, 1.7)(0, 0), 1.7, 1e-12);
}

TEST(Gp, OnePointPosteriorByHand) {
  // One observation y at x0; standardisation: mean y, sd 1 (a single point). Then in standardised units
  // the target is 0 and with constant mean c: mean(x) = c + k(x,x0)/(sf2+sn2) * (0 - c).
  Eigen::MatrixXd X(1, 1);
  X << 0.3;
  Eigen::VectorXd y(1);
  y << 2.0;
  Gp gp;
  const double sf2 = 1.5, sn2 = 0.1, c = 0.4, ls = 0.25;
  gp.set_hyper(hyper(1, ls, sf2, sn2, c), 2.0, 1.0, X, y);
  Eigen::MatrixXd Xs(2, 1);
  Xs << 0.3, 0.5;
  Eigen::VectorXd m, v;
  gp.predict(Xs, &m, &v);
  for (int i = 0; i < 2; ++i) {
    const double k = matern(std::abs(Xs(i, 0) - 0.3) / ls, sf2);
    EXPECT_NEAR(m[i], 2.0 + c + k / (sf2 + sn2) * (0 - c), 1e-10);
    EXPECT_NEAR(v[i], sf2 - k * k / (sf2 + sn2), 1e-10);
  }
  EXPECT_NEAR(gp.noise_var(), sn2, 1e-12);
}

TEST(Gp, ThreePointPosteriorAgainstDirectSolve) {
  Eigen::MatrixXd X(3, 2);
  X << 0.1, 0.9, 0.5, 0.5, 0.8, 0.2;
  Eigen::VectorXd y(3);
  y << 1.0, -0.5, 0.25;
  const double ym = 0.25, ysd = 2.0;
  const Eigen::VectorXd ys = (y.array() - ym) / ysd;
  const double sf2 = 0.8, sn2 = 0.05, c = -0.1;
  Eigen::VectorXd ls(2);
  ls << 0.3, 0.7;
  GpHyper h = hyper(2, 1, sf2, sn2, c);
  h.theta.head(2) = ls.array().log();
  Gp gp;
  gp.set_hyper(h, ym, ysd, X, y);
  Eigen::MatrixXd Xs(2, 2);
  Xs << 0.2, 0.2, 0.6, 0.7;
  Eigen::VectorXd m, v;
  gp.predict(Xs, &m, &v);
  // Direct: K = k(X,X) + sn2 I, mean = c + k*^T K^-1 (ys - c), var = sf2 - k*^T K^-1 k*.
  Eigen::MatrixXd K(3, 3);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      K(i, j) = matern(std::sqrt((((X.row(i) - X.row(j)).array()) / ls.transpose().array()).square().sum()), sf2) +
                (i == j ? sn2 : 0);
  const Eigen::MatrixXd Kinv = K.inverse();
  for (int s = 0; s < 2; ++s) {
    Eigen::VectorXd k(3);
    for (int i = 0; i < 3; ++i)
      k[i] = matern(std::sqrt((((Xs.row(s) - X.row(i)).array()) / ls.transpose().array()).square().sum()), sf2);
    const double mean_std = c + k.dot(Kinv * (ys.array() - c).matrix());
    EXPECT_NEAR(m[s], ym + ysd * mean_std, 1e-9);
    EXPECT_NEAR(v[s], ysd * ysd * (sf2 - k.dot(Kinv * k)), 1e-9);
  }
}

TEST(Gp, MarginalLikelihoodClosedForm) {
  Eigen::MatrixXd X(2, 1);
  X << 0.0, 0.5;
  Eigen::VectorXd y(2);
  y << 0.7, -0.3;
  const double sf2 = 1.2, sn2 = 0.2, c = 0.1, ls = 0.4;
  const double k12 = matern(0.5 / ls, sf2);
  Eigen::Matrix2d K;
  K << sf2 + sn2, k12, k12, sf2 + sn2;
  const Eigen::Vector2d r(0.7 - c, -0.3 - c);
  const double expect = -0.5 * r.dot(K.inverse() * r) - 0.5 * std::log(K.determinant()) - std::log(2 * M_PI);
  EXPECT_NEAR(gp_log_marginal_likelihood(X, y, hyper(1, ls, sf2, sn2, c).theta, nullptr), expect, 1e-10);
}

TEST(Gp, EveryGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  const int n = 9, D = 3;
  Eigen::MatrixXd X(n, D);
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < D; ++d) X(i, d) = u(rng);
    y[i] = std::sin(3 * X(i, 0)) + X(i, 1) * X(i, 2) + 0.1 * u(rng);
  }
  X.row(4) = X.row(3);   // a duplicate point as well
  Eigen::VectorXd theta(D + 3);
  theta << std::log(0.3), std::log(0.9), std::log(2.0), std::log(0.7), std::log(0.03), 0.2;
  Eigen::VectorXd g, gp;
  gp_log_marginal_likelihood(X, y, theta, &g);
  gp_log_prior(theta, &gp);
  for (int j = 0; j < theta.size(); ++j) {
    const double h = 1e-5;
    Eigen::VectorXd tp = theta, tm = theta;
    tp[j] += h;
    tm[j] -= h;
    const double fd = (gp_log_marginal_likelihood(X, y, tp, nullptr) - gp_log_marginal_likelihood(X, y, tm, nullptr)) / (2 * h);
    EXPECT_NEAR(g[j], fd, 1e-5 * std::max(1.0, std::abs(fd))) << "theta[" << j << "]";
    const double fdp = (gp_log_prior(tp, nullptr) - gp_log_prior(tm, nullptr)) / (2 * h);
    EXPECT_NEAR(gp[j], fdp, 1e-6) << "prior theta[" << j << "]";
  }
}

TEST(Gp, FitRecoversSmoothFunctionAndNoise) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> noise(0, 0.05);
  const int n = 40;
  Eigen::MatrixXd X(n, 2);
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) {
    X(i, 0) = u(rng);
    X(i, 1) = u(rng);
    y[i] = std::sin(4 * X(i, 0)) + noise(rng);   // dimension 1 is irrelevant
  }
  Gp gp;
  gp.fit(X, y, Gp::Options{});
  Eigen::MatrixXd Xs(3, 2);
  Xs << 0.2, 0.5, 0.5, 0.1, 0.8, 0.9;
  Eigen::VectorXd m, v;
  gp.predict(Xs, &m, &v);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(m[i], std::sin(4 * Xs(i, 0)), 0.1);
  EXPECT_NEAR(std::sqrt(gp.noise_var()), 0.05, 0.03);
  // ARD: the irrelevant dimension gets the longer length-scale.
  EXPECT_GT(gp.hyper().theta[1], gp.hyper().theta[0]);
}

TEST(Gp, DuplicatesAndConstantTargetsGiveNoNaN) {
  Eigen::MatrixXd X(4, 2);
  X << 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.1, 0.9;
  Eigen::VectorXd y = Eigen::VectorXd::Constant(4, 3.0);
  Gp gp;
  gp.fit(X, y, Gp::Options{});
  Eigen::MatrixXd Xs(2, 2);
  Xs << 0.5, 0.5, 0.0, 0.0;
  Eigen::VectorXd m, v;
  gp.predict(Xs, &m, &v);
  EXPECT_TRUE(m.allFinite());
  EXPECT_TRUE(v.allFinite());
  EXPECT_NEAR(m[0], 3.0, 1e-6);
  EXPECT_GE(v.minCoeff(), 0.0);
  // Exact duplicates with different values, tiny noise: the jittered Cholesky still succeeds.
  y << 1.0, 1.1, 0.9, 2.0;
  GpHyper h = hyper(2, 0.5, 1.0, 1e-12, 0.0);
  gp.set_hyper(h, 1.0, 1.0, X, y);
  gp.predict(Xs, &m, &v);
  EXPECT_TRUE(m.allFinite());
  EXPECT_TRUE(v.allFinite());
}

TEST(Gp, NoDataPredictsThePrior) {
  Gp gp;
  gp.fit(Eigen::MatrixXd(0, 2), Eigen::VectorXd(0), Gp::Options{});
  Eigen::VectorXd m, v;
  gp.predict(Eigen::MatrixXd::Zero(1, 2), &m, &v);
  EXPECT_TRUE(m.allFinite());
  EXPECT_GT(v[0], 0);
}

TEST(Gp, NoCandidatesPredictNothing) {
  // An exhausted space asks for zero candidates: empty answers (a triangular solve of zero columns bound a
  // reference to null in Eigen, which UndefinedBehaviorSanitizer reported).
  Eigen::MatrixXd X(2, 1);
  X << 0.2, 0.7;
  Eigen::VectorXd y(2);
  y << 1.0, 3.0;
  Gp gp;
  gp.set_hyper(hyper(1, 0.3, 1.0, 0.01, 0.0), 2.0, 1.0, X, y);
  Eigen::VectorXd m = Eigen::VectorXd::Ones(3), v = Eigen::VectorXd::Ones(3);
  gp.predict(Eigen::MatrixXd(0, 1), &m, &v);
  EXPECT_EQ(m.size(), 0);
  EXPECT_EQ(v.size(), 0);
}

}  // namespace
}  // namespace soartune::search
