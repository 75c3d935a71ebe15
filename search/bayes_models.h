// The surrogate models of the Bayesian search, fitted to the complete (and failed) trials of a job and its
// warm-start prior: one GP per tier on log duration, one GP on relative accuracy, one failure model. Shared by
// the strategy (acquisition) and by search::predict (the submission planner).
//
// Multi-fidelity (problem.fidelity_levels set): every level's trials train the models, the fidelity as one more
// input column (fidelity_coordinate, with its own ARD length-scale); predictions are for the full run, and
// complete_configs / complete_metrics list the full-fidelity trials only (the incumbent and the planner's
// measured means are full runs).
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
  int complete_count() const { return static_cast<int>(metrics_.size()); }   // full fidelity
  int training_count() const { return static_cast<int>(X_.rows()); }        // every level, believers included
  const std::vector<Config>& complete_configs() const { return configs_; }
  const std::vector<TrialMetrics>& complete_metrics() const { return metrics_; }

  // At the full run.
  std::vector<ModelPrediction> predict(const std::vector<Config>& configs) const;
  // Rows as features() makes them.
  std::vector<ModelPrediction> predict(const Eigen::MatrixXd& X) const;
  // Kriging believer: pretend `config` was observed at `fidelity` at the models' current mean (hyper-parameters
  // kept).
  void add_believer(const Config& config, double fidelity = 1.0);
  // The model input of a canonical config run at `fidelity`: its encoding, plus the fidelity column when the
  // problem has fidelity levels.
  Eigen::VectorXd features(const Config& canonical, double fidelity) const;

  std::array<double, kTiers> duration_noise_sd() const;   // log seconds
  double accuracy_noise_sd() const;                        // percent

 private:
  Encoding enc_;
  Config defaults_;
  std::vector<double> levels_;          // the problem's fidelity levels; empty: one fidelity
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
