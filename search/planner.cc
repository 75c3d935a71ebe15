#include "search/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include <Eigen/Cholesky>
#include <Eigen/Core>

namespace soartune::search {
namespace {

// Normal draws from mt19937_64 by Box-Muller, so a seed gives the same plan on every standard library.
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  double uniform() { return static_cast<double>((rng_() >> 11) + 1) * 0x1.0p-53; }   // (0, 1]
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

 private:
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool has_spare_ = false;
};

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

int knobs_differing(const Config& a, const Config& b) {
  std::set<std::string> names;
  for (const auto& [k, v] : a) names.insert(k);
  for (const auto& [k, v] : b) names.insert(k);
  int d = 0;
  for (const std::string& n : names) {
    auto ia = a.find(n), ib = b.find(n);
    if (ia == a.end() || ib == b.end() || !(ia->second == ib->second)) ++d;
  }
  return d;
}

// Draws of one candidate set's official scores: value(s, i) for draw s and candidate i (column-major, a
// column per candidate), plus each draw's gate level index (accuracy alone) for P(gate tier).
struct Draws {
  int n_draws = 0, n_cands = 0;
  std::vector<double> value;          // [i * n_draws + s]
  std::vector<double> speed;          // [i * n_draws + s]
  std::vector<uint8_t> level;         // [i * n_draws + s], index into gate_levels()
  const double* col(int i) const { return value.data() + static_cast<size_t>(i) * n_draws; }
};

struct Model {
  std::vector<GateTier> gate;                 // sorted by above_pct descending
  std::vector<double> levels;                 // gate_levels(): the multipliers then 0
  std::array<double, kTiers> weights{}, log_scale{}, cap{};
  double sigma = 2.0;
};

int gate_index(const Model& m, double acc) {
  for (size_t g = 0; g < m.gate.size(); ++g)
    if (acc > m.gate[g].above_pct) return static_cast<int>(g);
  return static_cast<int>(m.gate.size());
}

// Simulates `preds` (already calibrated) with prediction errors correlated by `chol` (lower Cholesky factor of
// the candidates' error correlation; empty = independent). Random numbers are drawn in a fixed order: per
// quantity, per draw, per candidate, so the same seed gives the same draws.
Draws simulate(const Model& m, const std::vector<Prediction>& preds, const Eigen::MatrixXd* chol, int n_draws,
               uint64_t seed) {
  const int n = static_cast<int>(preds.size());
  Draws d;
  d.n_draws = n_draws;
  d.n_cands = n;
  d.value.assign(static_cast<size_t>(n) * n_draws, 0.0);
  d.speed.assign(static_cast<size_t>(n) * n_draws, 0.0);
  d.level.assign(static_cast<size_t>(n) * n_draws, 0);
  Normal normal(seed);
  // Latent standard normals: kTiers duration errors + 1 accuracy error, correlated across candidates.
  std::array<Eigen::MatrixXd, kTiers + 1> z;
  for (auto& zq : z) {
    zq.resize(n, n_draws);
    for (int s = 0; s < n_draws; ++s)
      for (int i = 0; i < n; ++i) zq(i, s) = normal();
    if (chol) zq = (*chol) * zq;
  }
  for (int s = 0; s < n_draws; ++s) {
    for (int i = 0; i < n; ++i) {
      const Prediction& p = preds[i];
      double speed = 0;
      for (int t = 0; t < kTiers; ++t) {
        if (m.weights[t] == 0) continue;
        const double x = p.log_duration_mean[t] + p.log_duration_std[t] * z[t](i, s);
        speed += m.weights[t] * std::min(m.cap[t], std::exp(m.log_scale[t] - x));
      }
      const double acc_true = p.accuracy_mean_pct + p.accuracy_std_pct * z[kTiers](i, s);
      const double acc_official = std::min(100.0, acc_true + m.sigma * normal());
      const int g = gate_index(m, acc_official);
      const bool failed = normal.uniform() <= std::clamp(p.p_failure, 0.0, 1.0);
      const size_t at = static_cast<size_t>(i) * n_draws + s;
      d.speed[at] = speed;
      d.level[at] = static_cast<uint8_t>(g);
      d.value[at] = failed ? 0.0 : speed * m.levels[g];
    }
  }
  return d;
}

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// E[max(floor, columns in `set`)] over the draws.
double expected_best(const Draws& d, const std::vector<int>& set, double floor) {
  double sum = 0;
  for (int s = 0; s < d.n_draws; ++s) {
    double best = floor;
    for (int i : set) best = std::max(best, d.col(i)[s]);
    sum += best;
  }
  return sum / d.n_draws;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double binomial(int n, int k) {
  double r = 1;
  for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}

// Exact search: every k-subset, the running max carried down the recursion.
void search_subsets(const Draws& d, int k, int start, std::vector<int>& cur, std::vector<std::vector<double>>& maxes,
                    double& best_value, std::vector<int>& best_set) {
  const int depth = static_cast<int>(cur.size());
  if (depth == k) {
    const double v = mean_of(maxes[depth]);
    if (v > best_value + 1e-12) {
      best_value = v;
      best_set = cur;
    }
    return;
  }
  for (int i = start; i <= d.n_cands - (k - depth); ++i) {
    const double* c = d.col(i);
    auto& next = maxes[depth + 1];
    const auto& prev = maxes[depth];
    for (int s = 0; s < d.n_draws; ++s) next[s] = std::max(prev[s], c[s]);
    cur.push_back(i);
    search_subsets(d, k, i + 1, cur, maxes, best_value, best_set);
    cur.pop_back();
  }
}

std::string gate_text(const std::vector<double>& levels, const std::vector<double>& p) {
  std::string out;
  for (size_t g = 0; g < levels.size(); ++g) {
    if (g) out += ", ";
    out += "P(C=" + fmt("%g", levels[g]) + ") " + fmt("%.2f", p[g]);
  }
  return out;
}

Status check_prediction(const Prediction& p, const std::string& field) {
  for (int t = 0; t < kTiers; ++t) {
    if (!std::isfinite(p.log_duration_mean[t]))
      return Status::Invalid(field + ".log_duration_mean." + kTierNames[t] + ": not a finite number");
    if (!std::isfinite(p.log_duration_std[t]) || p.log_duration_std[t] < 0)
      return Status::Invalid(field + ".log_duration_std." + kTierNames[t] + ": must be finite and >= 0");
  }
  if (!std::isfinite(p.accuracy_mean_pct)) return Status::Invalid(field + ".accuracy_mean_pct: not a finite number");
  if (!std::isfinite(p.accuracy_std_pct) || p.accuracy_std_pct < 0)
    return Status::Invalid(field + ".accuracy_std_pct: must be finite and >= 0");
  if (!std::isfinite(p.p_failure) || p.p_failure < 0 || p.p_failure > 1)
    return Status::Invalid(field + ".p_failure: must be in [0, 1]");
  return Status::Ok();
}

}  // namespace

Result<Plan> plan(int k, const std::vector<PlanCandidate>& candidates, const ScoringSpec& scoring,
                  const std::array<double, kTiers>& reference_s, double accuracy_sigma_pct,
                  const Calibration& calibration, const PlanOptions& options) {
  if (k < 1) return Status::Invalid("k: " + std::to_string(k) + " is not allowed; allowed: >= 1");
  if (candidates.empty()) return Status::Precondition("candidates: no configs to plan from (no complete trials)");
  if (options.draws < 100) return Status::Invalid("options.draws: must be >= 100");
  if (!(options.similarity_decay >= 0 && options.similarity_decay < 1))
    return Status::Invalid("options.similarity_decay: must be in [0, 1)");
  if (!(options.safe_max_p_zero >= 0 && options.safe_max_p_zero <= 1))
    return Status::Invalid("options.safe_max_p_zero: must be in [0, 1]");
  if (options.max_candidates < 1) return Status::Invalid("options.max_candidates: must be >= 1");
  if (!std::isfinite(accuracy_sigma_pct)) return Status::Invalid("accuracy_sigma: not a finite number");
  if (scoring.gate.empty()) return Status::Invalid("scoring.gate: needs at least one tier");
  for (int t = 0; t < kTiers; ++t)
    if (scoring.weights[t] != 0 && !(reference_s[t] > 0) && !calibration.tier[t])
      return Status::Invalid(std::string("reference_s.") + kTierNames[t] + ": must be > 0");
  for (size_t i = 0; i < candidates.size(); ++i) {
    Status st = check_prediction(candidates[i].prediction, "candidates[" + std::to_string(i) + "].prediction");
    if (!st.ok()) return st;
  }

  Model m;
  m.gate = scoring.gate;
  std::sort(m.gate.begin(), m.gate.end(), [](const GateTier& a, const GateTier& b) { return a.above_pct > b.above_pct; });
  for (const GateTier& g : m.gate) m.levels.push_back(g.c);
  m.levels.push_back(0.0);
  m.weights = scoring.weights;
  std::array<double, kTiers> ref = reference_s;
  for (int t = 0; t < kTiers; ++t) {
    if (!(ref[t] > 0)) ref[t] = 1.0;   // calibrated tier without a local reference: any scale works
    m.log_scale[t] = std::log(100.0 * ref[t]);
    m.cap[t] = calibration.tier[t] ? 100.0 : std::numeric_limits<double>::infinity();
  }
  Plan out;
  m.sigma = calibration.sigma_pct(accuracy_sigma_pct);
  out.accuracy_sigma_pct = m.sigma;
  if (accuracy_sigma_pct > 0)
    out.sigma_source = "requested";
  else if (calibration.accuracy_sigma_pct)
    out.sigma_source = "learned from " + std::to_string(calibration.n_accuracy) + " official results";
  else
    out.sigma_source = "default";
  out.calibration = calibration.describe();

  std::vector<Prediction> calibrated;
  calibrated.reserve(candidates.size());
  for (const PlanCandidate& c : candidates) calibrated.push_back(calibration.apply(c.prediction, ref));

  // Keep the candidates worth a set search: the best by expected score alone, plus the safest and the boldest
  // (highest P(top gate), highest 90% quantile), which a set can use even when they are not best alone.
  std::vector<int> kept(candidates.size());
  std::iota(kept.begin(), kept.end(), 0);
  if (static_cast<int>(candidates.size()) > options.max_candidates) {
    const Draws pre = simulate(m, calibrated, nullptr, std::min(options.draws, 1000), options.seed ^ 0x9e3779b97f4a7c15ULL);
    const int n = pre.n_cands;
    std::vector<double> ev(n), p_top(n), q90(n);
    for (int i = 0; i < n; ++i) {
      std::vector<double> col(pre.col(i), pre.col(i) + pre.n_draws);
      ev[i] = mean_of(col);
      q90[i] = quantile(col, 0.9);
      int top = 0;
      for (int s = 0; s < pre.n_draws; ++s) top += pre.level[static_cast<size_t>(i) * pre.n_draws + s] == 0;
      p_top[i] = static_cast<double>(top) / pre.n_draws + 1e-6 * ev[i] / 100.0;
    }
    auto top_by = [&](const std::vector<double>& key, int count, std::set<int>& into) {
      std::vector<int> idx(n);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return key[a] > key[b]; });
      for (int i : idx) {
        if (count <= 0) break;
        if (into.insert(i).second) --count;
      }
    };
    std::set<int> keep;
    const int extra = std::max(1, options.max_candidates / 5);
    top_by(p_top, extra, keep);
    top_by(q90, extra, keep);
    top_by(ev, options.max_candidates - static_cast<int>(keep.size()), keep);
    kept.assign(keep.begin(), keep.end());
  }
  const int n = static_cast<int>(kept.size());
  out.candidates_considered = n;
  std::vector<Prediction> preds;
  for (int i : kept) preds.push_back(calibrated[i]);

  // Error correlation between similar configs.
  Eigen::MatrixXd chol;
  const bool correlated = options.similarity_decay > 0 && n > 1;
  if (correlated) {
    Eigen::MatrixXd r(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        r(i, j) = i == j ? 1.0
                         : std::pow(options.similarity_decay,
                                    knobs_differing(candidates[kept[i]].prediction.config,
                                                    candidates[kept[j]].prediction.config));
    for (double jitter = 1e-10;; jitter *= 10) {
      Eigen::LLT<Eigen::MatrixXd> llt(r + jitter * Eigen::MatrixXd::Identity(n, n));
      if (llt.info() == Eigen::Success) {
        chol = llt.matrixL();
        break;
      }
      if (jitter > 1e-2) return Status::Internal("planner: correlation matrix is not positive definite");
    }
  }
  const Draws d = simulate(m, preds, correlated ? &chol : nullptr, options.draws, options.seed);

  // Choose the set.
  const int kk = std::min(k, n);
  std::vector<int> set;
  const double n_subsets = binomial(n, kk);
  if (n_subsets <= static_cast<double>(options.exact_max_subsets)) {
    std::vector<std::vector<double>> maxes(kk + 1, std::vector<double>(d.n_draws, options.best_today));
    std::vector<int> cur;
    double best_value = -1;
    search_subsets(d, kk, 0, cur, maxes, best_value, set);
    out.method = "exact over " + fmt("%.0f", n_subsets) + " subsets of " + std::to_string(n) + " candidates";
  } else {
    for (int step = 0; step < kk; ++step) {
      double best_v = -1;
      int best_i = -1;
      for (int i = 0; i < n; ++i) {
        if (std::find(set.begin(), set.end(), i) != set.end()) continue;
        std::vector<int> trial_set = set;
        trial_set.push_back(i);
        const double v = expected_best(d, trial_set, options.best_today);
        if (v > best_v + 1e-12) {
          best_v = v;
          best_i = i;
        }
      }
      set.push_back(best_i);
    }
    out.method = "greedy by marginal gain over " + std::to_string(n) + " candidates";
  }

  // Order the chosen set by marginal gain, and explain each pick against its best replacement.
  const double final_value = expected_best(d, set, options.best_today);
  std::vector<int> order, rest = set;
  double prefix_value = options.best_today;
  std::vector<double> prefix_max(d.n_draws, options.best_today);
  const auto levels = m.levels;
  while (!rest.empty()) {
    size_t best_pos = 0;
    double best_v = -1;
    for (size_t r = 0; r < rest.size(); ++r) {
      std::vector<int> s = order;
      s.push_back(rest[r]);
      const double v = expected_best(d, s, options.best_today);
      if (v > best_v + 1e-12) {
        best_v = v;
        best_pos = r;
      }
    }
    const int i = rest[best_pos];
    rest.erase(rest.begin() + static_cast<long>(best_pos));

    PlanPick pick;
    pick.trial = candidates[kept[i]].trial;
    pick.config = candidates[kept[i]].prediction.config;
    std::vector<double> col(d.col(i), d.col(i) + d.n_draws);
    pick.predicted_score = mean_of(col);
    pick.score_lo = quantile(col, 0.1);
    pick.score_hi = quantile(col, 0.9);
    pick.p_failure = std::clamp(preds[i].p_failure, 0.0, 1.0);
    pick.p_gate.assign(levels.size(), 0.0);
    double speed_sum = 0;
    int above_prefix = 0, zero_before = 0, zero_after = 0;
    for (int s = 0; s < d.n_draws; ++s) {
      const size_t at = static_cast<size_t>(i) * d.n_draws + s;
      pick.p_gate[d.level[at]] += 1.0 / d.n_draws;
      speed_sum += d.speed[at];
      if (col[s] > prefix_max[s]) ++above_prefix;
      zero_before += prefix_max[s] <= 0;
      zero_after += std::max(prefix_max[s], col[s]) <= 0;
    }
    pick.speed_mean = speed_sum / d.n_draws;
    const double p_zero = pick.p_gate.back() + (1 - pick.p_gate.back()) * pick.p_failure;
    pick.role = p_zero <= options.safe_max_p_zero ? "safe" : "bold";
    pick.expected_best_after = best_v;
    pick.marginal_value = best_v - prefix_value;

    // Runner-up: the unchosen candidate that would do best in this pick's place in the final set.
    std::vector<int> others;
    for (int j : set)
      if (j != i) others.push_back(j);
    int runner = -1;
    double runner_set_value = -1;
    for (int j = 0; j < n; ++j) {
      if (std::find(set.begin(), set.end(), j) != set.end()) continue;
      std::vector<int> s = others;
      s.push_back(j);
      const double v = expected_best(d, s, options.best_today);
      if (v > runner_set_value + 1e-12) {
        runner_set_value = v;
        runner = j;
      }
    }
    double runner_alone = 0;
    if (runner >= 0) {
      pick.runner_up_trial = candidates[kept[runner]].trial;
      pick.runner_up_expected_best = runner_set_value;
      std::vector<int> s = order;
      s.push_back(runner);
      pick.runner_up_marginal = expected_best(d, s, options.best_today) - prefix_value;
      runner_alone = mean_of(std::vector<double>(d.col(runner), d.col(runner) + d.n_draws));
    }

    std::ostringstream e;
    e << "trial " << pick.trial << " (" << pick.role << "): predicted " << fmt("%.1f", pick.predicted_score)
      << " [10%-90%: " << fmt("%.1f", pick.score_lo) << "-" << fmt("%.1f", pick.score_hi) << "], "
      << fmt("%.1f", pick.speed_mean) << " before the gate; " << gate_text(levels, pick.p_gate) << "; P(failure) "
      << fmt("%.2f", pick.p_failure) << ". ";
    if (order.empty()) {
      e << "First pick: expected best of the day " << fmt("%.1f", best_v);
      if (options.best_today > 0) e << " (+" << fmt("%.1f", pick.marginal_value) << " over today's recorded best)";
      e << ". ";
    } else {
      e << "Adds " << fmt("%+.1f", pick.marginal_value) << " to the expected best of the day ("
        << fmt("%.1f", prefix_value) << " -> " << fmt("%.1f", best_v) << "): it beats the earlier picks in "
        << fmt("%.0f", 100.0 * above_prefix / d.n_draws) << "% of the draws";
      if (zero_before > 0)
        e << ", and P(day's best = 0) falls " << fmt("%.2f", static_cast<double>(zero_before) / d.n_draws) << " -> "
          << fmt("%.2f", static_cast<double>(zero_after) / d.n_draws);
      e << ". ";
    }
    if (runner < 0) {
      e << "Every candidate is in the plan.";
    } else {
      e << "Runner-up trial " << pick.runner_up_trial << ": ";
      if (runner_alone > pick.predicted_score + 1e-9)
        e << "scores more alone (" << fmt("%.1f", runner_alone) << " vs " << fmt("%.1f", pick.predicted_score)
          << ") but rises and falls with the other picks, ";
      else
        e << "expected " << fmt("%.1f", runner_alone) << " alone (vs " << fmt("%.1f", pick.predicted_score) << "), ";
      e << "in this pick's place the day's expected best would be " << fmt("%.1f", runner_set_value) << " ("
        << fmt("%+.1f", runner_set_value - final_value) << ").";
    }
    pick.explanation = e.str();
    out.picks.push_back(std::move(pick));

    order.push_back(i);
    prefix_value = best_v;
    for (int s = 0; s < d.n_draws; ++s) prefix_max[s] = std::max(prefix_max[s], d.col(i)[s]);
  }

  out.expected_best_score = final_value;
  double sq = 0;
  int all_zero = 0;
  for (int s = 0; s < d.n_draws; ++s) {
    sq += (prefix_max[s] - final_value) * (prefix_max[s] - final_value);
    all_zero += prefix_max[s] <= 0;
  }
  out.expected_best_stderr = std::sqrt(sq / std::max(1, d.n_draws - 1) / d.n_draws);
  out.p_all_zero = static_cast<double>(all_zero) / d.n_draws;
  return out;
}

std::string describe(const Plan& plan) {
  std::ostringstream os;
  for (size_t i = 0; i < plan.picks.size(); ++i) os << i + 1 << ". " << plan.picks[i].explanation << "\n";
  os << "Expected best official score of the day: " << fmt("%.1f", plan.expected_best_score) << " (+/- "
     << fmt("%.1f", plan.expected_best_stderr) << " Monte Carlo); P(every pick scores 0) "
     << fmt("%.2f", plan.p_all_zero) << "\n";
  os << "Accuracy noise sigma " << fmt("%.2f", plan.accuracy_sigma_pct) << " points (" << plan.sigma_source << "); "
     << plan.method << "\n";
  os << plan.calibration << "\n";
  return os.str();
}

}  // namespace soartune::search
