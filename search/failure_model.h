// Probability that a config fails (crash, out of memory, timeout): a kernel-smoothed Beta-Bernoulli
// estimate. Each observed trial votes for its outcome with a Gaussian weight of its distance in the encoded
// space; a Beta prior centred on the overall failure rate (strength `prior_strength` trials) keeps sparse
// regions near the base rate. The bandwidth is chosen by leave-one-out log likelihood, so the estimate is
// calibrated on the observed data rather than tuned by hand.
#pragma once

#include <vector>

#include <Eigen/Dense>

#include "core/failure_kind.h"

namespace soartune::search {

class FailureModel {
 public:
  // X: encoded configs (rows); failed[i]: whether trial i failed.
  void fit(const Eigen::MatrixXd& X, const std::vector<bool>& failed);
  // X: encoded configs (rows); outcome[i]: kNone for a trial that completed, else why it failed. Only failures
  // the config can cause count (is_about_the_config: invalid config, out of memory, crash, timeout, ...); a
  // trial killed from outside (cancelled, daemon restart, worker not started) says nothing about its config
  // and is left out.
  void fit(const Eigen::MatrixXd& X, const std::vector<FailureKind>& outcome);
  double probability(const Eigen::VectorXd& x) const;
  double bandwidth() const { return bandwidth_; }
  double base_rate() const { return base_rate_; }

 private:
  double estimate(const Eigen::VectorXd& x, double h, int skip) const;

  Eigen::MatrixXd X_;
  Eigen::VectorXd y_;
  double base_rate_ = 0.05;
  double prior_strength_ = 2.0;
  double bandwidth_ = 0.2;
};

}  // namespace soartune::search
