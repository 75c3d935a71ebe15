// A simulated race: 10 days x 3 official submissions against a known ground truth, comparing submission
// strategies by the final best official score and by how often a submission lands at C = 0.
//
// Ground truth per race: a pool of candidate configs (16-bit, 8-bit, 4-bit and mixed 4/8-bit weights, bf16 or
// FP8 KV, assorted batch limits) with true local tier durations, true local relative accuracy and a true crash
// probability. The local search's predictions are the truth plus estimation error (log durations +-4%,
// accuracy with a per-weight-format bias shared by similar configs plus a per-config error, crash rates +-0.1).
// An official evaluation: durations 10% slower than local with 2% run-to-run noise, scored against a leader
// at most 5% faster than our best; accuracy = true local accuracy + a systematic offset + N(0, sigma^2)
// (default sigma 2 points, capped at 100); a crash scores 0.
//
// Strategies:
//   planner       plan(k = 3) each day, the race's best so far as the floor (maximises the final best),
//                 calibration refitted from every official result recorded
//   planner-day   the same with the day's best as the floor (each day on its own)
//   top3          the 3 highest predicted scores (score at the predicted means, times 1 - p_failure)
//   top1          the highest predicted score, once a day
//
// Usage: race_sim [--races N] [--days D] [--per-day K] [--pool P] [--sigma S] [--offset O] [--draws M] [--seed X]
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "search/calibration.h"
#include "search/planner.h"

using namespace soartune;
using namespace soartune::search;

namespace {

struct Options {
  int races = 200, days = 10, per_day = 3, pool = 30, draws = 2000;
  double sigma = 2.0, offset = -0.4;
  uint64_t seed = 1;
};

struct TrueConfig {
  Config config;
  std::array<double, kTiers> duration_s{};   // true local durations
  double accuracy = 0;                       // true local relative accuracy
  double p_failure = 0;
};

struct Race {
  std::vector<TrueConfig> truth;
  std::vector<PlanCandidate> predicted;
  std::array<double, kTiers> leader_s{};     // the fastest team's official duration per tier
  std::array<double, kTiers> local_ref_s{};  // best predicted local duration per tier
};

struct Official {
  std::array<double, kTiers> tier_score{};
  double accuracy = 0, c = 0, final_score = 0;
  bool failed = false;
};

double gate(const ScoringSpec& s, double acc) {
  for (const GateTier& g : s.gate)
    if (acc > g.above_pct) return g.c;
  return 0;
}

Race make_race(std::mt19937_64& rng, const Options& opt) {
  std::normal_distribution<double> n01(0, 1);
  std::uniform_real_distribution<double> u01(0, 1);
  Race r;
  const std::array<double, kTiers> base = {2.0, 4.0, 8.0};
  // Per-weight-format accuracy bias of the local estimate: similar configs are wrong together.
  std::array<double, 4> family_bias;
  for (double& b : family_bias) b = 0.4 * n01(rng);
  const int64_t mrr[] = {16, 32, 64, 128};
  const int64_t mpt[] = {1024, 2048, 4096, 8192};
  for (int i = 0; i < opt.pool; ++i) {
    TrueConfig t;
    const double f = u01(rng);
    const int family = f < 0.25 ? 0 : f < 0.45 ? 1 : f < 0.75 ? 2 : 3;   // w16, w8, w4, w4 + 8-bit attention
    const bool fp8_kv = u01(rng) < 0.5;
    const int64_t weight_bits = family == 0 ? 16 : family == 1 ? 8 : 4;
    t.config = {{"weight_bits", weight_bits},
                {"attn_weight_bits", int64_t{family == 3 ? 8 : 0}},
                {"kv_cache_dtype", std::string(fp8_kv ? "fp8_e4m3" : "bf16")},
                {"max_running_requests", mrr[rng() % 4]},
                {"max_prefill_tokens", mpt[rng() % 4]}};
    // Speed-up over bf16 per tier: 4-bit helps decode-bound c1 most.
    static const std::array<std::array<double, kTiers>, 4> speedup = {
        {{1.0, 1.0, 1.0}, {1.06, 1.05, 1.03}, {1.65, 1.45, 1.25}, {1.50, 1.35, 1.18}}};
    for (int k = 0; k < kTiers; ++k)
      t.duration_s[k] = base[k] / (speedup[family][k] * (fp8_kv ? 1.03 : 1.0) * std::exp(0.05 * n01(rng)));
    static const std::array<double, 4> acc_mean = {99.9, 99.6, 98.3, 99.0};
    static const std::array<double, 4> acc_spread = {0.15, 0.3, 0.6, 0.4};
    t.accuracy = std::min(100.0, acc_mean[family] + acc_spread[family] * n01(rng) - (fp8_kv ? 0.3 : 0.0));
    t.p_failure = u01(rng) < 0.15 ? 0.2 + 0.6 * u01(rng) : 0.0;
    r.truth.push_back(t);

    PlanCandidate c;
    c.trial = i;
    c.prediction.config = t.config;
    for (int k = 0; k < kTiers; ++k) {
      c.prediction.log_duration_mean[k] = std::log(t.duration_s[k]) + 0.04 * n01(rng);
      c.prediction.log_duration_std[k] = 0.04;
    }
    c.prediction.accuracy_mean_pct = t.accuracy + family_bias[family] + 0.5 * n01(rng);
    c.prediction.accuracy_std_pct = std::hypot(0.4, 0.5);
    c.prediction.p_failure = std::clamp(t.p_failure + 0.1 * n01(rng), 0.0, 1.0);
    r.predicted.push_back(c);
  }
  for (int k = 0; k < kTiers; ++k) {
    double best_true = 1e30, best_pred = 1e30;
    for (int i = 0; i < opt.pool; ++i) {
      best_true = std::min(best_true, r.truth[i].duration_s[k]);
      best_pred = std::min(best_pred, std::exp(r.predicted[i].prediction.log_duration_mean[k]));
    }
    r.leader_s[k] = 1.1 * best_true * (0.95 + 0.05 * u01(rng));
    r.local_ref_s[k] = best_pred;
  }
  return r;
}

Official evaluate(const Race& r, int i, const ScoringSpec& s, const Options& opt, std::mt19937_64& rng) {
  std::normal_distribution<double> n01(0, 1);
  std::uniform_real_distribution<double> u01(0, 1);
  const TrueConfig& t = r.truth[i];
  Official o;
  double speed = 0;
  for (int k = 0; k < kTiers; ++k) {
    const double d = 1.1 * t.duration_s[k] * std::exp(0.02 * n01(rng));
    o.tier_score[k] = std::min(100.0, 100.0 * r.leader_s[k] / d);
    speed += s.weights[k] * o.tier_score[k];
  }
  o.accuracy = std::min(100.0, t.accuracy + opt.offset + opt.sigma * n01(rng));
  o.c = gate(s, o.accuracy);
  o.failed = u01(rng) < t.p_failure;
  o.final_score = o.failed ? 0.0 : speed * o.c;
  return o;
}

// The naive "predicted score": the score at the predicted means, times the chance of not crashing.
double naive_score(const Race& r, int i, const ScoringSpec& s) {
  const Prediction& p = r.predicted[i].prediction;
  double speed = 0;
  for (int k = 0; k < kTiers; ++k) speed += s.weights[k] * 100.0 * r.local_ref_s[k] / std::exp(p.log_duration_mean[k]);
  return speed * gate(s, p.accuracy_mean_pct) * (1 - p.p_failure);
}

struct Tally {
  double sum_best = 0, sum_sq_best = 0, sum_daily_best = 0;
  long submissions = 0, zero_gate = 0, failed = 0, races_with_zero = 0, days = 0;
  double plan_seconds = 0;
  long plans = 0;
  std::vector<double> race_best;   // per race, for paired comparisons
  std::vector<double> daily_best;  // per race: mean of the days' best
};

enum class Policy { kPlanner, kPlannerDay, kTop3, kTop1 };

void run_race(const Race& r, Policy strat, const ScoringSpec& s, const Options& opt, uint64_t eval_seed,
              Tally& tally) {
  std::mt19937_64 rng(eval_seed);   // the same official-noise stream for every strategy of this race
  std::vector<int> naive_order(r.predicted.size());
  for (size_t i = 0; i < naive_order.size(); ++i) naive_order[i] = static_cast<int>(i);
  std::stable_sort(naive_order.begin(), naive_order.end(),
                   [&](int a, int b) { return naive_score(r, a, s) > naive_score(r, b, s); });
  std::vector<CalibrationSample> recorded;
  Calibration cal;
  double race_best = 0, daily_sum = 0;
  bool any_zero = false;
  for (int day = 0; day < opt.days; ++day) {
    std::vector<int> picks;
    if (strat == Policy::kTop3) {
      picks.assign(naive_order.begin(), naive_order.begin() + std::min<size_t>(3, naive_order.size()));
    } else if (strat == Policy::kTop1) {
      picks = {naive_order[0]};
    } else {
      PlanOptions po;
      po.draws = opt.draws;
      po.seed = opt.seed * 1000 + static_cast<uint64_t>(day);
      po.best_today = strat == Policy::kPlanner ? race_best : 0.0;
      const auto t0 = std::chrono::steady_clock::now();
      auto p = plan(opt.per_day, r.predicted, s, r.local_ref_s, 0.0, cal, po);
      tally.plan_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++tally.plans;
      if (!p.ok()) {
        std::fprintf(stderr, "plan failed: %s\n", p.status().message.c_str());
        std::exit(1);
      }
      for (const PlanPick& pick : p.value().picks) picks.push_back(static_cast<int>(pick.trial));
    }
    double day_best = 0;
    for (int i : picks) {
      const Official o = evaluate(r, i, s, opt, rng);
      ++tally.submissions;
      if (o.failed) ++tally.failed;
      if (!o.failed && o.c == 0) ++tally.zero_gate;
      if (o.final_score == 0) any_zero = true;
      day_best = std::max(day_best, o.final_score);
      CalibrationSample cs;
      for (int k = 0; k < kTiers; ++k) {
        cs.local_duration_s[k] = std::exp(r.predicted[i].prediction.log_duration_mean[k]);
        cs.official_tier_score[k] = o.tier_score[k];
      }
      cs.local_accuracy_pct = r.predicted[i].prediction.accuracy_mean_pct;
      cs.official_accuracy_pct = o.accuracy;
      cs.official_failed = o.failed;
      recorded.push_back(cs);
    }
    race_best = std::max(race_best, day_best);
    tally.sum_daily_best += day_best;
    daily_sum += day_best;
    ++tally.days;
    if (strat == Policy::kPlanner || strat == Policy::kPlannerDay) {
      auto c = fit_calibration(recorded);
      if (c.ok()) cal = c.value();
    }
  }
  tally.race_best.push_back(race_best);
  tally.daily_best.push_back(daily_sum / opt.days);
  tally.sum_best += race_best;
  tally.sum_sq_best += race_best * race_best;
  if (any_zero) ++tally.races_with_zero;
}

bool arg(int argc, char** argv, int& i, const char* name, double& out) {
  if (std::strcmp(argv[i], name) != 0 || i + 1 >= argc) return false;
  out = std::atof(argv[++i]);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    double v = 0;
    if (arg(argc, argv, i, "--races", v)) opt.races = static_cast<int>(v);
    else if (arg(argc, argv, i, "--days", v)) opt.days = static_cast<int>(v);
    else if (arg(argc, argv, i, "--per-day", v)) opt.per_day = static_cast<int>(v);
    else if (arg(argc, argv, i, "--pool", v)) opt.pool = static_cast<int>(v);
    else if (arg(argc, argv, i, "--draws", v)) opt.draws = static_cast<int>(v);
    else if (arg(argc, argv, i, "--sigma", v)) opt.sigma = v;
    else if (arg(argc, argv, i, "--offset", v)) opt.offset = v;
    else if (arg(argc, argv, i, "--seed", v)) opt.seed = static_cast<uint64_t>(v);
    else {
      std::fprintf(stderr,
                   "usage: race_sim [--races N] [--days D] [--per-day K] [--pool P] [--sigma S] [--offset O] "
                   "[--draws M] [--seed X]\n");
      return 2;
    }
  }
  if (opt.races < 1 || opt.days < 1 || opt.per_day < 1 || opt.pool < 3 || opt.draws < 100 || !(opt.sigma >= 0)) {
    std::fprintf(stderr, "race_sim: --races, --days, --per-day >= 1, --pool >= 3, --draws >= 100, --sigma >= 0\n");
    return 2;
  }
  const ScoringSpec scoring;
  const std::array<std::pair<Policy, const char*>, 4> strategies = {{{Policy::kPlanner, "planner"},
                                                                       {Policy::kPlannerDay, "planner-day"},
                                                                       {Policy::kTop3, "top3"},
                                                                       {Policy::kTop1, "top1"}}};
  std::array<Tally, 4> tallies;
  double oracle_sum = 0;
  for (int race = 0; race < opt.races; ++race) {
    std::mt19937_64 rng(opt.seed * 7919 + static_cast<uint64_t>(race));
    const Race r = make_race(rng, opt);
    // The best single config's true expected official score, for scale.
    {
      std::mt19937_64 erng(opt.seed * 31 + static_cast<uint64_t>(race));
      double best = 0;
      for (int i = 0; i < opt.pool; ++i) {
        double sum = 0;
        for (int rep = 0; rep < 400; ++rep) sum += evaluate(r, i, scoring, opt, erng).final_score;
        best = std::max(best, sum / 400);
      }
      oracle_sum += best;
    }
    const uint64_t eval_seed = opt.seed * 104729 + static_cast<uint64_t>(race);
    for (size_t s = 0; s < strategies.size(); ++s) run_race(r, strategies[s].first, scoring, opt, eval_seed, tallies[s]);
  }

  std::printf("race_sim: %d races x %d days x %d submissions/day, pool %d, official accuracy noise sigma %.2f, "
              "offset %+.2f, planner draws %d, seed %llu\n",
              opt.races, opt.days, opt.per_day, opt.pool, opt.sigma, opt.offset, opt.draws,
              static_cast<unsigned long long>(opt.seed));
  std::printf("best single config, true expected official score (mean over races): %.2f\n\n", oracle_sum / opt.races);
  std::printf("| strategy | E[final best] | +/- (s.e.) | mean daily best | zero-gate rate / submission | crash rate | "
              "P(race has a 0 submission) | submissions | ms / plan |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (size_t s = 0; s < strategies.size(); ++s) {
    const Tally& t = tallies[s];
    const double mean = t.sum_best / opt.races;
    const double var = std::max(0.0, t.sum_sq_best / opt.races - mean * mean);
    std::printf("| %s | %.2f | %.2f | %.2f | %.3f | %.3f | %.2f | %ld | %s |\n", strategies[s].second, mean,
                std::sqrt(var / opt.races), t.sum_daily_best / t.days,
                static_cast<double>(t.zero_gate) / static_cast<double>(t.submissions),
                static_cast<double>(t.failed) / static_cast<double>(t.submissions),
                static_cast<double>(t.races_with_zero) / opt.races, t.submissions,
                t.plans ? (std::to_string(static_cast<int>(1000.0 * t.plan_seconds / t.plans + 0.5))).c_str() : "-");
  }
  // Paired against top3 (same races, same ground truth): mean difference and its standard error.
  auto paired = [&](const std::vector<double>& a, const std::vector<double>& b, double& mean, double& se) {
    double sum = 0, sq = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      sum += a[i] - b[i];
      sq += (a[i] - b[i]) * (a[i] - b[i]);
    }
    const double n = static_cast<double>(a.size());
    mean = sum / n;
    se = std::sqrt(std::max(0.0, sq / n - mean * mean) / n);
  };
  std::printf("\n| strategy | final best - top3 (paired) | mean daily best - top3 (paired) |\n|---|---|---|\n");
  for (size_t s = 0; s < strategies.size(); ++s) {
    if (strategies[s].first == Policy::kTop3) continue;
    double m1, s1, m2, s2;
    paired(tallies[s].race_best, tallies[2].race_best, m1, s1);
    paired(tallies[s].daily_best, tallies[2].daily_best, m2, s2);
    std::printf("| %s | %+.2f +/- %.2f | %+.2f +/- %.2f |\n", strategies[s].second, m1, s1, m2, s2);
  }
  return 0;
}
