// Gaussian-process regression on the unit cube: Matern-5/2 kernel with one length-scale per dimension (ARD),
// a constant mean and a Gaussian noise term. Hyper-parameters maximise the log marginal likelihood plus weak
// log-normal priors (which keep a handful of points from producing absurd length-scales), by L-BFGS with
// analytic gradients from several starts. Targets are standardised internally; a constant target (sd 0) is
// handled as sd 1. The Cholesky factor is retried with growing jitter, so duplicate inputs give no NaN.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Dense>

namespace soartune::search {

// theta = [log l_1 .. log l_D, log signal variance, log noise variance, constant mean] (standardised units).
struct GpHyper {
  Eigen::VectorXd theta;
  int dims() const { return static_cast<int>(theta.size()) - 3; }
};

// Matern-5/2 ARD kernel matrix between the rows of A and B.
Eigen::MatrixXd matern52(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B, const Eigen::VectorXd& lengthscale,
                         double signal_var);

// Log marginal likelihood of standardised targets y at inputs X (rows) under theta; the gradient with
// respect to theta when `grad` is not null.
double gp_log_marginal_likelihood(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const Eigen::VectorXd& theta,
                                  Eigen::VectorXd* grad);
// The log prior density of theta (up to a constant) and its gradient, added to the likelihood when fitting.
double gp_log_prior(const Eigen::VectorXd& theta, Eigen::VectorXd* grad);

class Gp {
 public:
  struct Options {
    int restarts = 3;            // starts besides the default one
    int max_evals = 120;         // per start
    int max_fit_points = 96;     // above this, hyper-parameters are fitted on a spread subset of the points
    uint64_t seed = 0;
  };

  // Fits hyper-parameters to (X, y) and conditions on every point.
  void fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const Options& options);
  // Conditions on (X, y) keeping the hyper-parameters (and standardisation) of the last fit: for
  // believer points added to the data.
  void condition(const Eigen::MatrixXd& X, const Eigen::VectorXd& y);
  // Sets the hyper-parameters directly (standardised units) and conditions.
  void set_hyper(const GpHyper& hyper, double y_mean, double y_sd, const Eigen::MatrixXd& X, const Eigen::VectorXd& y);

  // Posterior of the latent function at the rows of Xs, in the units of y: mean and variance (noise excluded).
  void predict(const Eigen::MatrixXd& Xs, Eigen::VectorXd* mean, Eigen::VectorXd* var) const;
  double noise_var() const;          // observation noise variance, in the units of y
  const GpHyper& hyper() const { return hyper_; }
  int size() const { return static_cast<int>(X_.rows()); }
  double y_mean() const { return y_mean_; }
  double y_sd() const { return y_sd_; }

 private:
  void factor();

  GpHyper hyper_;
  Eigen::MatrixXd X_;
  Eigen::VectorXd y_std_;            // standardised targets
  double y_mean_ = 0, y_sd_ = 1;
  Eigen::MatrixXd L_;                // lower Cholesky factor of K + noise + jitter
  Eigen::VectorXd alpha_;            // (K + noise)^-1 (y - mean)
};

}  // namespace soartune::search
