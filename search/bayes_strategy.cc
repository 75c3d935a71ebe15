#include "search/bayes_strategy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <set>

#include "search/bayes_models.h"
#include "search/latin_hypercube.h"

namespace soartune::search {
namespace {

// Quasi-random candidates per suggestion and the best few refined by one-knob-at-a-time hill climbing; fewer
// once the models hold many trials, where each prediction costs O(n^2) and the models change little per trial.
constexpr int kCandidates = 640, kCandidatesLarge = 192;
constexpr int kLocalStarts = 4, kLocalStartsLarge = 2;
constexpr int kLocalSteps = 6, kLocalStepsLarge = 3;
constexpr int kLargeHistory = 100;
constexpr int kNeighbourSeeds = 3;     // best observed configs whose neighbours join the candidates

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x7F4A7C159E3779B9ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ULL;
  return x ^ (x >> 29);
}

struct Scored {
  Config config;
  ModelPrediction prediction;
  Acquisition acquisition;
};

// Larger is better: log EI first, then the expected score (where EI underflows to zero everywhere).
bool better(const Acquisition& a, const Acquisition& b) {
  if (a.log_ei != b.log_ei) return a.log_ei > b.log_ei;
  return a.expected_score > b.expected_score;
}

class BayesStrategy : public Strategy {
 public:
  std::string name() const override { return "bayes"; }
  std::optional<double> last_expected_improvement_pct() const override { return last_ei_pct_; }

  std::vector<Suggestion> ask(const SearchProblem& problem, const std::vector<Observation>& history,
                              int q) override;

 private:
  std::optional<double> last_ei_pct_;
};

std::vector<Suggestion> BayesStrategy::ask(const SearchProblem& problem, const std::vector<Observation>& history,
                                           int q) {
  std::vector<Suggestion> out;
  last_ei_pct_.reset();
  if (q <= 0) return out;
  const Encoding enc(problem.space.params());
  const size_t levels = problem.scoring.gate.size() + 1;
  std::set<std::string> seen;
  for (const Observation& o : history) seen.insert(config_key(enc.canonical(o.config, problem.reference)));

  if (history.empty()) {
    Suggestion s;
    s.config = problem.reference;
    s.strategy = "reference";
    s.p_gate.assign(levels, 0.0);
    s.p_gate[0] = 1.0;
    s.note = "reference trial: the baseline for durations and accuracy";
    out.push_back(s);
    seen.insert(config_key(enc.canonical(problem.reference, problem.reference)));
  }

  // Initial design: a maximin Latin hypercube, unless the warm-start prior already covers the space.
  const std::vector<Observation> all = with_prior(problem, history);
  int prior_done = 0;
  for (const Observation& o : problem.prior) prior_done += o.outcome != Outcome::kPending;
  const int n_init = prior_done >= 2 * enc.num_params() ? 0 : std::clamp(enc.num_params() + 1, 4, 10);
  // Configs started beyond the reference; with fidelity levels one config runs at several levels, so distinct ones.
  int started = history.empty() ? 0 : static_cast<int>(history.size()) - 1;
  if (!problem.fidelity_levels.empty()) {
    std::set<std::string> configs;
    for (const Observation& o : history) configs.insert(config_key(enc.canonical(o.config, problem.reference)));
    started = static_cast<int>(configs.size()) -
              static_cast<int>(configs.count(config_key(enc.canonical(problem.reference, problem.reference))));
  }
  int design_left = n_init - started;
  if (design_left > 0) {
    const auto design = latin_hypercube(n_init, enc.num_params(), mix(problem.seed, 1), 32);
    for (const auto& u : design) {
      if (static_cast<int>(out.size()) >= q || design_left <= 0) break;
      Config c = enc.from_unit(u, problem.reference);
      if (!seen.insert(config_key(c)).second) continue;
      Suggestion s;
      s.config = std::move(c);
      s.strategy = "initial-design";
      s.p_gate.assign(levels, 0.0);
      s.note = "space-filling design point " + std::to_string(n_init - design_left + 1) + " of " +
               std::to_string(n_init);
      out.push_back(std::move(s));
      --design_left;
    }
  }
  if (static_cast<int>(out.size()) >= q) return out;

  SurrogateModels models(problem, all);
  const uint64_t round_seed = mix(problem.seed, history.size() + 2);
  if (models.training_count() < 2 || models.complete_count() < 1) {
    // Too little to model (everything failed so far): keep exploring space-fillingly.
    const auto pts = latin_hypercube(4 * q + 64, enc.num_params(), round_seed, 1);
    for (const auto& u : pts) {
      if (static_cast<int>(out.size()) >= q) break;
      Config c = enc.from_unit(u, problem.reference);
      if (!seen.insert(config_key(c)).second) continue;
      Suggestion s;
      s.config = std::move(c);
      s.strategy = "random";
      s.p_gate.assign(levels, 0.0);
      s.note = "exploring: fewer than two complete trials to model";
      out.push_back(std::move(s));
    }
    return out;
  }

  // Incumbent: the best measured gated score, durations relative to the best seen (or the targets).
  const auto reference_s = reference_durations(problem.scoring, models.complete_metrics());
  double best = 0;
  std::vector<std::pair<double, int>> ranked;
  for (int i = 0; i < models.complete_count(); ++i) {
    const double s = score(problem.scoring, models.complete_metrics()[i], reference_s).final_score;
    best = std::max(best, s);
    ranked.emplace_back(-s, i);
  }
  std::sort(ranked.begin(), ranked.end());

  // Pending trials (and this batch's picks) are believed to come out at the models' mean.
  for (const Observation& o : history) {
    if (o.outcome == Outcome::kPending) models.add_believer(o.config, o.fidelity);
  }

  // The fixed part of the candidate pool: quasi-random configs and neighbours of the best observed ones.
  std::vector<Config> pool;
  std::set<std::string> pool_keys;
  auto offer = [&](Config c) {
    std::string k = config_key(c);
    if (seen.count(k) || !pool_keys.insert(k).second) return;
    pool.push_back(std::move(c));
  };
  const bool large = models.training_count() > kLargeHistory;
  const int local_starts = large ? kLocalStartsLarge : kLocalStarts;
  const int local_steps = large ? kLocalStepsLarge : kLocalSteps;
  for (const auto& u : latin_hypercube(large ? kCandidatesLarge : kCandidates, enc.num_params(), round_seed, 1)) {
    offer(enc.from_unit(u, problem.reference));
  }
  for (int r = 0; r < std::min<int>(kNeighbourSeeds, static_cast<int>(ranked.size())); ++r) {
    for (Config& c : enc.neighbours(models.complete_configs()[ranked[r].second], problem.reference)) offer(std::move(c));
  }

  auto evaluate = [&](const std::vector<Config>& configs) {
    std::vector<Scored> scored;
    const auto preds = models.predict(configs);
    scored.reserve(configs.size());
    for (size_t i = 0; i < configs.size(); ++i) {
      scored.push_back({configs[i], preds[i], gated_expected_improvement(problem.scoring, reference_s, best, preds[i])});
    }
    return scored;
  };

  while (static_cast<int>(out.size()) < q) {
    std::vector<Config> live;
    for (const Config& c : pool) {
      if (!seen.count(config_key(c))) live.push_back(c);
    }
    std::vector<Scored> scored = evaluate(live);
    std::vector<int> order(scored.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return better(scored[a].acquisition, scored[b].acquisition); });

    // Local search: from the best few candidates, change one knob at a time while the acquisition improves.
    std::optional<Scored> pick;
    for (int s = 0; s < std::min<int>(local_starts, static_cast<int>(order.size())); ++s) {
      Scored cur = scored[order[s]];
      for (int step = 0; step < local_steps; ++step) {
        std::vector<Config> nb;
        for (Config& c : enc.neighbours(cur.config, problem.reference)) {
          if (!seen.count(config_key(c))) nb.push_back(std::move(c));
        }
        if (nb.empty()) break;
        std::vector<Scored> ns = evaluate(nb);
        int bi = -1;
        for (int i = 0; i < static_cast<int>(ns.size()); ++i) {
          if (better(ns[i].acquisition, bi < 0 ? cur.acquisition : ns[bi].acquisition)) bi = i;
        }
        if (bi < 0) break;
        cur = ns[bi];
      }
      if (!pick || better(cur.acquisition, pick->acquisition)) pick = cur;
    }
    if (!pick) break;   // the space is exhausted

    Suggestion s;
    s.config = pick->config;
    s.strategy = "bayes";
    s.predicted_score = pick->acquisition.expected_score;
    s.predicted_score_std = pick->acquisition.score_std;
    s.expected_improvement = pick->acquisition.ei;
    s.p_failure = pick->prediction.p_failure;
    s.p_gate = pick->acquisition.p_gate;
    char note[200];
    std::snprintf(note, sizeof note, "EI %.3g over best %.2f; predicted %.2f +- %.2f, P(C=%.2g) %.2f, P(fail) %.2f",
                  pick->acquisition.ei, best, s.predicted_score, s.predicted_score_std,
                  problem.scoring.gate_levels().front(), s.p_gate.empty() ? 0.0 : s.p_gate.front(), s.p_failure);
    s.note = note;
    if (!last_ei_pct_) last_ei_pct_ = best > 0 ? 100.0 * pick->acquisition.ei / best : 100.0;
    seen.insert(config_key(s.config));
    out.push_back(std::move(s));
    if (static_cast<int>(out.size()) < q)
      models.add_believer(pick->config, problem.fidelity_levels.empty() ? 1.0 : problem.fidelity_levels.front());
  }
  return out;
}

}  // namespace

std::unique_ptr<Strategy> make_bayes_strategy() { return std::make_unique<BayesStrategy>(); }

}  // namespace soartune::search
