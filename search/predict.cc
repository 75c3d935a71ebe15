// search::predict (search/prediction.h): the Bayesian search's models, asked for the submission planner.
#include <cmath>
#include <map>

#include "search/bayes_models.h"
#include "search/prediction.h"

namespace soartune::search {

std::vector<Prediction> predict(const SearchProblem& problem, const std::vector<Observation>& history,
                                const std::vector<Config>& candidates) {
  const std::vector<Observation> all = with_prior(problem, history);
  const SurrogateModels models(problem, all);
  const Encoding& enc = models.encoding();

  // Measured means of configs observed complete (repeats averaged).
  struct Measured {
    std::array<double, kTiers> log_d{};
    double acc = 0;
    int n = 0;
  };
  std::map<std::string, Measured> measured;
  for (size_t i = 0; i < models.complete_configs().size(); ++i) {
    Measured& m = measured[config_key(models.complete_configs()[i])];
    const TrialMetrics& t = models.complete_metrics()[i];
    for (int k = 0; k < kTiers; ++k) m.log_d[k] += std::log(t.duration_s[k]);
    m.acc += std::min(t.relative_accuracy_pct, 100.0);
    ++m.n;
  }

  std::vector<Config> canon;
  canon.reserve(candidates.size());
  for (const Config& c : candidates) canon.push_back(enc.canonical(c, problem.reference));
  const std::vector<ModelPrediction> mp = models.predict(canon);
  const auto dur_noise = models.duration_noise_sd();
  const double acc_noise = models.accuracy_noise_sd();

  std::vector<Prediction> out;
  out.reserve(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    Prediction p;
    p.config = candidates[i];
    p.p_failure = mp[i].p_failure;
    auto it = measured.find(config_key(canon[i]));
    if (it != measured.end()) {
      const Measured& m = it->second;
      const double shrink = 1.0 / std::sqrt(static_cast<double>(m.n));
      for (int k = 0; k < kTiers; ++k) {
        p.log_duration_mean[k] = m.log_d[k] / m.n;
        p.log_duration_std[k] = dur_noise[k] * shrink;
      }
      p.accuracy_mean_pct = m.acc / m.n;
      p.accuracy_std_pct = acc_noise * shrink;
    } else {
      p.log_duration_mean = mp[i].log_duration_mean;
      p.log_duration_std = mp[i].log_duration_std;
      p.accuracy_mean_pct = mp[i].accuracy_mean_pct;
      p.accuracy_std_pct = mp[i].accuracy_std_pct;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace soartune::search
