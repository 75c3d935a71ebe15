#include "search/multi_fidelity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "search/encoding.h"

namespace soartune::search {

namespace {
constexpr double kLevelTolerance = 1e-9;
}  // namespace

soartune::Status check_fidelity_levels(const std::vector<double>& levels, int eta, const std::string& field) {
  if (levels.size() < 2 || static_cast<int>(levels.size()) > kMaxFidelityLevels)
    return soartune::Status::Invalid(field + ".levels: must list 2.." + std::to_string(kMaxFidelityLevels) +
                                     " workload fractions, ascending, ending with 1 (got " +
                                     std::to_string(levels.size()) + ")");
  for (size_t i = 0; i < levels.size(); ++i) {
    const std::string f = field + ".levels[" + std::to_string(i) + "]";
    if (!std::isfinite(levels[i]) || levels[i] <= 0 || levels[i] > 1)
      return soartune::Status::Invalid(f + ": must be a number in (0, 1]");
    if (i > 0 && !(levels[i] > levels[i - 1]))
      return soartune::Status::Invalid(f + ": must be larger than the level before it (levels ascend)");
  }
  if (levels.back() != 1.0)
    return soartune::Status::Invalid(field + ".levels[" + std::to_string(levels.size() - 1) +
                                     "]: the last level must be 1 (the full workload)");
  if (eta < kMinEta || eta > kMaxEta)
    return soartune::Status::Invalid(field + ".eta: must be an integer in " + std::to_string(kMinEta) + ".." +
                                     std::to_string(kMaxEta));
  return soartune::Status::Ok();
}

bool is_full_fidelity(double fidelity) { return fidelity >= 1.0 - kLevelTolerance; }

int fidelity_level_index(const std::vector<double>& levels, double fidelity) {
  for (size_t i = 0; i < levels.size(); ++i)
    if (std::fabs(levels[i] - fidelity) <= kLevelTolerance) return static_cast<int>(i);
  return -1;
}

double fidelity_coordinate(const std::vector<double>& levels, double fidelity) {
  if (levels.empty() || levels.front() >= 1.0) return 1.0;
  const double lo = levels.front();
  return std::clamp(std::log(std::max(fidelity, lo) / lo) / std::log(1.0 / lo), 0.0, 1.0);
}

std::optional<Suggestion> next_promotion(const SearchProblem& problem, const std::vector<Observation>& history,
                                         bool any_rank) {
  const std::vector<double>& levels = problem.fidelity_levels;
  if (levels.size() < 2) return std::nullopt;
  const Encoding enc(problem.space.params());
  const int L = static_cast<int>(levels.size());
  // Per config: the highest level it has run or started at; per rung: its complete members.
  std::map<std::string, int> highest;
  std::vector<std::vector<const Observation*>> rung(static_cast<size_t>(L));
  std::vector<std::set<std::string>> rung_keys(static_cast<size_t>(L));
  for (const Observation& o : history) {
    const int k = fidelity_level_index(levels, o.fidelity);
    if (k < 0) continue;
    const std::string key = config_key(enc.canonical(o.config, problem.reference));
    auto [it, fresh] = highest.emplace(key, k);
    if (!fresh) it->second = std::max(it->second, k);
    if (o.outcome == Outcome::kComplete && rung_keys[k].insert(key).second) rung[k].push_back(&o);
  }
  ScoringSpec rung_scoring = problem.scoring;
  rung_scoring.target_s = {};
  for (int k = L - 2; k >= 0; --k) {
    const auto& members = rung[k];
    const int top = any_rank ? static_cast<int>(members.size()) : static_cast<int>(members.size()) / problem.eta;
    if (top == 0) continue;
    std::vector<TrialMetrics> ms;
    for (const Observation* o : members) ms.push_back(o->metrics);
    const auto ref = reference_durations(rung_scoring, ms);
    std::vector<std::pair<double, size_t>> ranked;
    for (size_t i = 0; i < members.size(); ++i) ranked.emplace_back(-score(rung_scoring, ms[i], ref).final_score, i);
    std::stable_sort(ranked.begin(), ranked.end());
    for (int r = 0; r < top; ++r) {
      const Observation& o = *members[ranked[r].second];
      if (!(-ranked[r].first > 0)) break;   // gated out (C = 0) or no speed: nothing worth promoting
      const Config c = enc.canonical(o.config, problem.reference);
      if (highest.at(config_key(c)) > k) continue;
      Suggestion s;
      s.config = c;
      s.strategy = "promotion";
      s.fidelity = levels[k + 1];
      s.predicted_score = -ranked[r].first;
      s.p_gate.assign(problem.scoring.gate_levels().size(), 0.0);
      char note[200];
      if (any_rank)
        std::snprintf(note, sizeof note, "promoted from fidelity %.4g to %.4g: rank %d of %zu at its level, the best "
                      "not yet promoted (no new config left to screen)", levels[k], levels[k + 1], r + 1, members.size());
      else
        std::snprintf(note, sizeof note, "promoted from fidelity %.4g to %.4g: rank %d of %zu at its level (top %d = 1/%d)",
                      levels[k], levels[k + 1], r + 1, members.size(), top, problem.eta);
      s.note = note;
      return s;
    }
  }
  return std::nullopt;
}

namespace {

class MultiFidelityStrategy : public Strategy {
 public:
  explicit MultiFidelityStrategy(std::unique_ptr<Strategy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::optional<double> last_expected_improvement_pct() const override { return last_ei_pct_; }

  std::vector<Suggestion> ask(const SearchProblem& problem, const std::vector<Observation>& history,
                              int q) override {
    last_ei_pct_.reset();
    if (problem.fidelity_levels.empty()) {
      std::vector<Suggestion> out = inner_->ask(problem, history, q);
      last_ei_pct_ = inner_->last_expected_improvement_pct();
      return out;
    }
    std::vector<Suggestion> out;
    std::vector<Observation> seen = history;
    auto pending = [&](const Suggestion& s) {
      Observation o;
      o.config = s.config;
      o.outcome = Outcome::kPending;
      o.fidelity = s.fidelity;
      seen.push_back(std::move(o));
    };
    while (static_cast<int>(out.size()) < q) {
      if (std::optional<Suggestion> p = next_promotion(problem, seen)) {
        pending(*p);
        out.push_back(std::move(*p));
        continue;
      }
      std::vector<Suggestion> fresh = inner_->ask(problem, seen, 1);
      if (fresh.empty()) {
        std::optional<Suggestion> p = next_promotion(problem, seen, /*any_rank=*/true);
        if (!p) break;
        pending(*p);
        out.push_back(std::move(*p));
        continue;
      }
      Suggestion s = std::move(fresh.front());
      // The reference is the baseline of the full run; every new config is screened at the lowest level.
      s.fidelity = s.strategy == "reference" ? 1.0 : problem.fidelity_levels.front();
      if (!last_ei_pct_) last_ei_pct_ = inner_->last_expected_improvement_pct();
      pending(s);
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  std::unique_ptr<Strategy> inner_;
  std::optional<double> last_ei_pct_;
};

}  // namespace

std::unique_ptr<Strategy> with_multi_fidelity(std::unique_ptr<Strategy> inner) {
  return std::make_unique<MultiFidelityStrategy>(std::move(inner));
}

}  // namespace soartune::search
