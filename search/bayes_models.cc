#include "search/bayes_models.h"

#include <algorithm>
#include <cmath>

#include "search/multi_fidelity.h"

namespace soartune::search {

std::vector<Observation> with_prior(const SearchProblem& problem, const std::vector<Observation>& history) {
  std::vector<Observation> all = problem.prior;
  all.insert(all.end(), history.begin(), history.end());
  return all;
}

SurrogateModels::SurrogateModels(const SearchProblem& problem, const std::vector<Observation>& observations)
    : enc_(problem.space.params()), defaults_(problem.reference), levels_(problem.fidelity_levels) {
  std::vector<Eigen::VectorXd> fx, train;
  std::vector<TrialMetrics> train_metrics;
  std::vector<FailureKind> failed;
  for (const Observation& o : observations) {
    if (o.outcome == Outcome::kPending || o.outcome == Outcome::kPruned) continue;
    const double fidelity = levels_.empty() ? 1.0 : o.fidelity;
    const Config c = enc_.canonical(o.config, defaults_);
    fx.push_back(features(c, fidelity));
    failed.push_back(o.outcome == Outcome::kFailed ? o.failure : FailureKind::kNone);
    if (o.outcome != Outcome::kComplete) continue;
    bool finite = std::isfinite(o.metrics.relative_accuracy_pct);
    for (double d : o.metrics.duration_s) finite = finite && std::isfinite(d) && d > 0;
    if (!finite) continue;   // NaN / inf / non-positive measurements are rejected at the boundary
    train.push_back(fx.back());
    train_metrics.push_back(o.metrics);
    if (!is_full_fidelity(fidelity)) continue;
    configs_.push_back(c);
    metrics_.push_back(o.metrics);
  }
  const int n = static_cast<int>(train.size());
  const int D = enc_.dims() + (levels_.empty() ? 0 : 1);
  X_.resize(n, D);
  for (int t = 0; t < kTiers; ++t) log_d_[t].resize(n);
  acc_.resize(n);
  for (int i = 0; i < n; ++i) {
    X_.row(i) = train[i].transpose();
    for (int t = 0; t < kTiers; ++t) log_d_[t][i] = std::log(train_metrics[i].duration_s[t]);
    acc_[i] = std::min(train_metrics[i].relative_accuracy_pct, 100.0);
  }
  Gp::Options opt;
  opt.seed = problem.seed * 7919 + static_cast<uint64_t>(n);
  // Many trials: the hyper-parameters are well determined by a subset and one start, which keeps a suggestion
  // at 300 trials inside 100 ms.
  opt.restarts = n <= 24 ? 3 : (n <= 80 ? 2 : 0);
  opt.max_evals = n <= 80 ? 120 : 40;
  opt.max_fit_points = n <= 80 ? 64 : 48;
  for (int t = 0; t < kTiers; ++t) {
    opt.seed += 101;
    duration_[t].fit(X_, log_d_[t], opt);
  }
  opt.seed += 101;
  accuracy_.fit(X_, acc_, opt);

  Eigen::MatrixXd FX(static_cast<Eigen::Index>(fx.size()), D);
  for (size_t i = 0; i < fx.size(); ++i) FX.row(static_cast<Eigen::Index>(i)) = fx[i].transpose();
  failure_.fit(FX, failed);
}

Eigen::VectorXd SurrogateModels::features(const Config& canonical, double fidelity) const {
  const Eigen::VectorXd x = enc_.encode(canonical);
  if (levels_.empty()) return x;
  Eigen::VectorXd f(x.size() + 1);
  f << x, fidelity_coordinate(levels_, fidelity);
  return f;
}

std::vector<ModelPrediction> SurrogateModels::predict(const std::vector<Config>& configs) const {
  Eigen::MatrixXd X(static_cast<Eigen::Index>(configs.size()), X_.cols());
  for (size_t i = 0; i < configs.size(); ++i) X.row(static_cast<Eigen::Index>(i)) = features(configs[i], 1.0).transpose();
  return predict(X);
}

std::vector<ModelPrediction> SurrogateModels::predict(const Eigen::MatrixXd& X) const {
  const Eigen::Index m = X.rows();
  std::vector<ModelPrediction> out(static_cast<size_t>(m));
  Eigen::VectorXd mean, var;
  for (int t = 0; t < kTiers; ++t) {
    duration_[t].predict(X, &mean, &var);
    for (Eigen::Index i = 0; i < m; ++i) {
      out[i].log_duration_mean[t] = mean[i];
      out[i].log_duration_std[t] = std::sqrt(var[i]);
    }
  }
  accuracy_.predict(X, &mean, &var);
  const double noise = accuracy_noise_sd();
  for (Eigen::Index i = 0; i < m; ++i) {
    out[i].accuracy_mean_pct = mean[i];
    out[i].accuracy_std_pct = std::sqrt(var[i]);
    out[i].accuracy_noise_pct = noise;
    out[i].p_failure = failure_.probability(X.row(i).transpose());
  }
  return out;
}

void SurrogateModels::add_believer(const Config& config, double fidelity) {
  const Eigen::VectorXd x = features(enc_.canonical(config, defaults_), levels_.empty() ? 1.0 : fidelity);
  Eigen::MatrixXd xm = x.transpose();
  const Eigen::Index n = X_.rows();
  X_.conservativeResize(n + 1, Eigen::NoChange);
  X_.row(n) = x.transpose();
  Eigen::VectorXd mean;
  for (int t = 0; t < kTiers; ++t) {
    duration_[t].predict(xm, &mean, nullptr);
    log_d_[t].conservativeResize(n + 1);
    log_d_[t][n] = mean[0];
    duration_[t].condition(X_, log_d_[t]);
  }
  accuracy_.predict(xm, &mean, nullptr);
  acc_.conservativeResize(n + 1);
  acc_[n] = mean[0];
  accuracy_.condition(X_, acc_);
}

std::array<double, kTiers> SurrogateModels::duration_noise_sd() const {
  std::array<double, kTiers> s{};
  for (int t = 0; t < kTiers; ++t) s[t] = std::sqrt(duration_[t].noise_var());
  return s;
}

double SurrogateModels::accuracy_noise_sd() const { return std::sqrt(accuracy_.noise_var()); }

}  // namespace soartune::search
