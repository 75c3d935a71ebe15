#include "search/gp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <nlopt.hpp>

namespace soartune::search {
namespace {

constexpr double kSqrt5 = 2.23606797749979;
constexpr double kLog2Pi = 1.8378770664093453;

// Bounds of theta; standardised targets on inputs in [0, 1].
constexpr double kLogLengthLow = -3.912, kLogLengthHigh = 4.6;      // 0.02 .. 100
constexpr double kLogSignalLow = -6.9, kLogSignalHigh = 3.9;        // 1e-3 .. 50
constexpr double kLogNoiseLow = -13.8, kLogNoiseHigh = 0.7;         // 1e-6 .. 2
constexpr double kMeanLow = -5, kMeanHigh = 5;

// Weak priors: signal around the data's spread, noise small; the length-scale prior's centre grows with the
// dimension (as sqrt(D) / 2 at D = 1 .. ), since in more dimensions a point's neighbours are farther away
// and one knob alone rarely changes the response much.
constexpr double kLogLengthPriorSd = 1.2;
double log_length_prior(int dims) { return std::log(0.5) + 0.5 * std::log(std::max(1, dims)); }
constexpr double kLogSignalPrior = 0.0, kLogSignalPriorSd = 1.5;
constexpr double kLogNoisePrior = -5.0, kLogNoisePriorSd = 2.5;
constexpr double kMeanPriorSd = 1.5;

// Squared scaled distances r^2 between rows of A and B.
Eigen::MatrixXd scaled_sqdist(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B, const Eigen::VectorXd& ls) {
  const Eigen::RowVectorXd inv = ls.cwiseInverse().transpose();
  const Eigen::MatrixXd As = A.array().rowwise() * inv.array();
  const Eigen::MatrixXd Bs = B.array().rowwise() * inv.array();
  Eigen::MatrixXd d = (-2.0 * As * Bs.transpose()).eval();
  d.colwise() += As.rowwise().squaredNorm();
  d.rowwise() += Bs.rowwise().squaredNorm().transpose();
  return d.cwiseMax(0.0);
}

// Cholesky of K with jitter escalation; returns the jitter used (negative on failure).
double robust_cholesky(Eigen::MatrixXd K, Eigen::MatrixXd* L) {
  const double scale = std::max(K.diagonal().mean(), 1e-12);
  double jitter = 0;
  for (int attempt = 0; attempt < 12; ++attempt) {
    if (jitter > 0) K.diagonal().array() += jitter - (attempt > 1 ? jitter / 10 : 0);
    Eigen::LLT<Eigen::MatrixXd> llt(K);
    if (llt.info() == Eigen::Success) {
      *L = llt.matrixL();
      if (L->allFinite()) return jitter;
    }
    jitter = jitter == 0 ? 1e-10 * scale : jitter * 10;
  }
  return -1;
}

}  // namespace

Eigen::MatrixXd matern52(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B, const Eigen::VectorXd& lengthscale,
                         double signal_var) {
  const Eigen::ArrayXXd r = scaled_sqdist(A, B, lengthscale).array().sqrt();
  return (signal_var * (1.0 + kSqrt5 * r + (5.0 / 3.0) * r.square()) * (-kSqrt5 * r).exp()).matrix();
}

double gp_log_marginal_likelihood(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const Eigen::VectorXd& theta,
                                  Eigen::VectorXd* grad) {
  const int n = static_cast<int>(X.rows());
  const int D = static_cast<int>(X.cols());
  const Eigen::VectorXd ls = theta.head(D).array().exp();
  const double sf2 = std::exp(theta[D]);
  const double sn2 = std::exp(theta[D + 1]);
  const double c = theta[D + 2];
  const Eigen::ArrayXXd r = scaled_sqdist(X, X, ls).array().sqrt();
  const Eigen::ArrayXXd e = (-kSqrt5 * r).exp();
  Eigen::MatrixXd Kf = (sf2 * (1.0 + kSqrt5 * r + (5.0 / 3.0) * r.square()) * e).matrix();
  Eigen::MatrixXd K = Kf;
  K.diagonal().array() += sn2;
  Eigen::MatrixXd L;
  if (robust_cholesky(K, &L) < 0) {
    if (grad) grad->setZero(theta.size());
    return -std::numeric_limits<double>::infinity();
  }
  const auto tri = L.triangularView<Eigen::Lower>();
  const Eigen::VectorXd resid = y.array() - c;
  Eigen::VectorXd alpha = tri.solve(resid);
  L.transpose().triangularView<Eigen::Upper>().solveInPlace(alpha);
  const double logdet = 2.0 * L.diagonal().array().log().sum();
  const double lml = -0.5 * resid.dot(alpha) - 0.5 * logdet - 0.5 * n * kLog2Pi;
  if (grad) {
    grad->setZero(theta.size());
    Eigen::MatrixXd Kinv = Eigen::MatrixXd::Identity(n, n);
    tri.solveInPlace(Kinv);
    L.transpose().triangularView<Eigen::Upper>().solveInPlace(Kinv);
    const Eigen::MatrixXd W = alpha * alpha.transpose() - Kinv;
    // dK/dlog l_d = sf2 * 5/3 (1 + sqrt5 r) exp(-sqrt5 r) * (x_id - x_jd)^2 / l_d^2.
    const Eigen::MatrixXd M = (W.array() * (sf2 * (5.0 / 3.0) * (1.0 + kSqrt5 * r) * e)).matrix();
    const Eigen::VectorXd row = M.rowwise().sum();
    const Eigen::MatrixXd MX = M * X;
    for (int d = 0; d < D; ++d) {
      const double s = 2.0 * X.col(d).array().square().matrix().dot(row) - 2.0 * X.col(d).dot(MX.col(d));
      (*grad)[d] = 0.5 * s / (ls[d] * ls[d]);
    }
    (*grad)[D] = 0.5 * (W.array() * Kf.array()).sum();
    (*grad)[D + 1] = 0.5 * sn2 * W.trace();
    (*grad)[D + 2] = alpha.sum();
  }
  return lml;
}

double gp_log_prior(const Eigen::VectorXd& theta, Eigen::VectorXd* grad) {
  const int D = static_cast<int>(theta.size()) - 3;
  double lp = 0;
  if (grad) grad->setZero(theta.size());
  auto term = [&](int i, double mu, double sd) {
    const double z = (theta[i] - mu) / sd;
    lp -= 0.5 * z * z;
    if (grad) (*grad)[i] = -z / sd;
  };
  for (int d = 0; d < D; ++d) term(d, log_length_prior(D), kLogLengthPriorSd);
  term(D, kLogSignalPrior, kLogSignalPriorSd);
  term(D + 1, kLogNoisePrior, kLogNoisePriorSd);
  term(D + 2, 0.0, kMeanPriorSd);
  return lp;
}

namespace {

struct FitData {
  const Eigen::MatrixXd* X;
  const Eigen::VectorXd* y;
  double best = -std::numeric_limits<double>::infinity();
  std::vector<double> best_theta;
};

double objective(const std::vector<double>& t, std::vector<double>& g, void* data) {
  auto* fd = static_cast<FitData*>(data);
  const Eigen::VectorXd theta = Eigen::Map<const Eigen::VectorXd>(t.data(), static_cast<Eigen::Index>(t.size()));
  Eigen::VectorXd gl, gp;
  const bool want = !g.empty();
  double v = gp_log_marginal_likelihood(*fd->X, *fd->y, theta, want ? &gl : nullptr) + gp_log_prior(theta, want ? &gp : nullptr);
  if (!std::isfinite(v)) {
    if (want) std::fill(g.begin(), g.end(), 0.0);
    return 1e100;
  }
  if (v > fd->best) {
    fd->best = v;
    fd->best_theta = t;
  }
  if (want) {
    for (size_t i = 0; i < g.size(); ++i) g[i] = -(gl[static_cast<Eigen::Index>(i)] + gp[static_cast<Eigen::Index>(i)]);
  }
  return -v;
}

}  // namespace

void Gp::fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const Options& options) {
  const int n = static_cast<int>(X.rows());
  const int D = static_cast<int>(X.cols());
  y_mean_ = n > 0 ? y.mean() : 0.0;
  const double var = n > 1 ? (y.array() - y_mean_).square().sum() / (n - 1) : 0.0;
  y_sd_ = var > 1e-24 ? std::sqrt(var) : 1.0;
  Eigen::VectorXd ys = (y.array() - y_mean_) / y_sd_;

  Eigen::VectorXd theta0(D + 3);
  theta0.head(D).setConstant(log_length_prior(D));
  theta0[D] = 0.0;
  theta0[D + 1] = std::log(1e-2);
  theta0[D + 2] = 0.0;
  if (n >= 2) {
    // The fit runs on at most max_fit_points points, spread over the range of y (evenly in sorted order).
    Eigen::MatrixXd Xf = X;
    Eigen::VectorXd yf = ys;
    if (n > options.max_fit_points && options.max_fit_points >= 2) {
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ys[a] < ys[b]; });
      const int m = options.max_fit_points;
      Xf.resize(m, D);
      yf.resize(m);
      for (int k = 0; k < m; ++k) {
        const int i = order[static_cast<size_t>(std::llround(static_cast<double>(k) * (n - 1) / (m - 1)))];
        Xf.row(k) = X.row(i);
        yf[k] = ys[i];
      }
    }
    FitData fd{&Xf, &yf, -std::numeric_limits<double>::infinity(), {}};
    std::vector<double> lower(D + 3), upper(D + 3);
    for (int d = 0; d < D; ++d) {
      lower[d] = kLogLengthLow;
      upper[d] = kLogLengthHigh;
    }
    lower[D] = kLogSignalLow, upper[D] = kLogSignalHigh;
    lower[D + 1] = kLogNoiseLow, upper[D + 1] = kLogNoiseHigh;
    lower[D + 2] = kMeanLow, upper[D + 2] = kMeanHigh;
    std::mt19937_64 rng(options.seed ^ 0xC0FFEEULL);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int start = 0; start <= options.restarts; ++start) {
      std::vector<double> t(theta0.data(), theta0.data() + D + 3);
      if (start > 0) {
        for (int d = 0; d < D; ++d) t[d] = std::log(0.08) + u(rng) * (std::log(3.0) - std::log(0.08));
        t[D] = std::log(0.3) + u(rng) * (std::log(3.0) - std::log(0.3));
        t[D + 1] = std::log(1e-4) + u(rng) * (std::log(0.3) - std::log(1e-4));
        t[D + 2] = (u(rng) - 0.5);
      }
      nlopt::opt opt(nlopt::LD_LBFGS, static_cast<unsigned>(D + 3));
      opt.set_lower_bounds(lower);
      opt.set_upper_bounds(upper);
      opt.set_min_objective(objective, &fd);
      opt.set_maxeval(options.max_evals);
      opt.set_ftol_rel(1e-7);
      double value = 0;
      try {
        opt.optimize(t, value);
      } catch (const std::exception&) {
        // Round-off or a failed line search: the best point seen so far is kept in fd.
      }
    }
    if (!fd.best_theta.empty()) theta0 = Eigen::Map<const Eigen::VectorXd>(fd.best_theta.data(), D + 3);
  }
  hyper_.theta = theta0;
  X_ = X;
  y_std_ = ys;
  factor();
}

void Gp::set_hyper(const GpHyper& hyper, double y_mean, double y_sd, const Eigen::MatrixXd& X,
                   const Eigen::VectorXd& y) {
  hyper_ = hyper;
  y_mean_ = y_mean;
  y_sd_ = y_sd > 0 ? y_sd : 1.0;
  condition(X, y);
}

void Gp::condition(const Eigen::MatrixXd& X, const Eigen::VectorXd& y) {
  X_ = X;
  y_std_ = (y.array() - y_mean_) / y_sd_;
  factor();
}

void Gp::factor() {
  const int D = hyper_.dims();
  const int n = static_cast<int>(X_.rows());
  if (n == 0) {
    L_.resize(0, 0);
    alpha_.resize(0);
    return;
  }
  const Eigen::VectorXd ls = hyper_.theta.head(D).array().exp();
  Eigen::MatrixXd K = matern52(X_, X_, ls, std::exp(hyper_.theta[D]));
  K.diagonal().array() += std::exp(hyper_.theta[D + 1]);
  if (robust_cholesky(K, &L_) < 0) {
    // Practically unreachable (the noise floor keeps K positive definite); fall back to the diagonal.
    L_ = K.diagonal().cwiseSqrt().asDiagonal();
  }
  alpha_ = L_.triangularView<Eigen::Lower>().solve((y_std_.array() - hyper_.theta[D + 2]).matrix());
  L_.transpose().triangularView<Eigen::Upper>().solveInPlace(alpha_);
}

void Gp::predict(const Eigen::MatrixXd& Xs, Eigen::VectorXd* mean, Eigen::VectorXd* var) const {
  const int D = hyper_.dims();
  const double sf2 = std::exp(hyper_.theta[D]);
  const double c = hyper_.theta[D + 2];
  const Eigen::Index ns = Xs.rows();
  if (ns == 0) {  // no candidates (Eigen's triangular solve of zero columns binds a reference to null)
    if (mean) mean->resize(0);
    if (var) var->resize(0);
    return;
  }
  if (X_.rows() == 0) {
    if (mean) *mean = Eigen::VectorXd::Constant(ns, y_mean_ + y_sd_ * c);
    if (var) *var = Eigen::VectorXd::Constant(ns, sf2 * y_sd_ * y_sd_);
    return;
  }
  const Eigen::VectorXd ls = hyper_.theta.head(D).array().exp();
  const Eigen::MatrixXd ks = matern52(Xs, X_, ls, sf2);   // ns x n
  if (mean) *mean = ((ks * alpha_).array() + c) * y_sd_ + y_mean_;
  if (var) {
    // k*^T K^-1 k* = |L^-1 k*|^2: one blocked triangular solve for every candidate at once.
    Eigen::MatrixXd v = ks.transpose();
    L_.triangularView<Eigen::Lower>().solveInPlace(v);
    *var = ((sf2 - v.colwise().squaredNorm().transpose().array()).max(1e-12 * sf2) * y_sd_ * y_sd_).matrix();
  }
}

double Gp::noise_var() const {
  return std::exp(hyper_.theta[hyper_.dims() + 1]) * y_sd_ * y_sd_;
}

}  // namespace soartune::search
