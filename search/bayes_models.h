// The surrogate models of the Bayesian search, fitted to the complete (and failed) trials of a job and its
// warm-start prior: one GP per tier on log duration, one GP on relative accuracy, one failure model. Shared by
// the strategy (acquisition) and by search::predict (the submission planner).
#pragma once

#include <array>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "search/acquisition.h"
#include "search/encoding.h"
#include "search/failure_model.h"
#include "search/gp.h"
#include "search/strategy.h"

namespace soartune::search {

class SurrogateModels {
 public:
  SurrogateModels(const SearchProblem& problem, const std::vector<Observation>& observations);

  const Encoding& encoding() const { return enc_; }
  int complete_count() const { return static_cast<int>(metrics_.size()); }
  const std::vector<Config>& complete_configs() const { return configs_; }
  const std::vector<TrialMetrics>& complete_metrics() const { return metrics_; }

  std::vector<ModelPrediction> predict(const std::vector<Config>& configs) const;
  std::vector<ModelPrediction> predict(const Eigen::MatrixXd& X) const;
  // Kriging believer: pretend `config` was observed at the models' current mean (hyper-parameters kept).
  void add_believer(const Config& config);

  std::array<double, kTiers> duration_noise_sd() const;   // log seconds
  double accuracy_noise_sd() const;                        // percent

 private:
  Encoding enc_;
  Config defaults_;
  std::vector<Config> configs_;
  std::vector<TrialMetrics> metrics_;
  Eigen::MatrixXd X_;
  std::array<Eigen::VectorXd, kTiers> log_d_;
  Eigen::VectorXd acc_;
  std::array<Gp, kTiers> duration_;
  Gp accuracy_;
  FailureModel failure_;
};

// Every observation of `history` plus the prior, canonicalised to the space.
std::vector<Observation> with_prior(const SearchProblem& problem, const std::vector<Observation>& history);

}  // namespace soartune::search
