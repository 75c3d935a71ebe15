// bo_bench: trials needed by the Bayesian, random and grid searches to come within 1% of the best achievable
// gated score, on documented landscapes, over many seeds; and the Bayesian suggestion time at 300 trials.
//
// Landscapes (every trial's truth is a fixed function; the search sees it through measurement noise):
//   race    A model of the race (docs/perf-log, search benches): weight bits / group / attention override / KV dtype /
//           batch and prefill limits / CUDA graphs. Durations of the three tiers from a roofline-like formula,
//           relative accuracy from per-knob penalties, failures (out of memory, graph capture) in regions.
//           Measurement noise: 2% on durations (log-normal), 0.3 points on accuracy.
//   replay  A table of real trials of our engine (search/bench/data/tiny_engine_trials.csv, made by
//           run_tiny_grid.py there): the space is the table's grid, a trial returns the table's row.
//
// Usage: bo_bench [--landscape race|replay|all] [--seeds N] [--budget N] [--csv PATH]
//                 [--export-landscape PATH] [--timing-only] [--within PCT (default 1)]
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <time.h>

#include "search/bayes_models.h"
#include "search/bayes_strategy.h"
#include "search/space.h"
#include "search/strategy.h"

using namespace soartune;
using namespace soartune::search;

namespace {

// A trial reaches the target when its true gated score is at least this fraction of the best (--within).
double g_target = 0.99;

struct Truth {
  bool failed = false;
  TrialMetrics metrics;   // noiseless
};

struct Landscape {
  std::string name;
  Space space;
  Config reference;
  ScoringSpec scoring;
  std::function<Truth(const Config&)> truth;
  double duration_noise = 0.02, accuracy_noise = 0.3;
  std::vector<Config> all;                        // every config (enumerated)
  std::array<double, kTiers> best_durations{};    // fastest over the space: "the fastest team"
  double best_score = 0;
};

int64_t geti(const Config& c, const char* k, int64_t d) {
  auto it = c.find(k);
  return it == c.end() ? d : std::get<int64_t>(it->second);
}
std::string gets(const Config& c, const char* k, const std::string& d) {
  auto it = c.find(k);
  return it == c.end() ? d : std::get<std::string>(it->second);
}
bool getb(const Config& c, const char* k, bool d) {
  auto it = c.find(k);
  return it == c.end() ? d : std::get<bool>(it->second);
}

Space parse_space(const std::string& yaml) {
  auto r = Space::parse(YAML::Load(yaml));
  if (!r.ok()) {
    std::fprintf(stderr, "space: %s\n", r.status().message.c_str());
    std::exit(1);
  }
  return r.value();
}

// Every canonical config of the space, by walking the domains.
std::vector<Config> enumerate(const Space& space, const Config& defaults) {
  std::vector<Config> out;
  std::set<std::string> keys;
  std::function<void(size_t, Config)> rec = [&](size_t i, Config c) {
    if (i == space.params().size()) {
      Config k = space.canonical(c, defaults);
      if (keys.insert(config_key(k)).second) out.push_back(k);
      return;
    }
    const ParamSpec& p = space.params()[i];
    if (!space.active(p, c)) {
      rec(i + 1, c);
      return;
    }
    for (const Value& v : p.domain()) {
      c[p.name] = v;
      rec(i + 1, c);
    }
  };
  rec(0, {});
  return out;
}

void finish(Landscape& L) {
  L.all = enumerate(L.space, L.reference);
  L.best_durations = {1e300, 1e300, 1e300};
  for (const Config& c : L.all) {
    Truth t = L.truth(c);
    if (t.failed) continue;
    for (int k = 0; k < kTiers; ++k) L.best_durations[k] = std::min(L.best_durations[k], t.metrics.duration_s[k]);
  }
  for (const Config& c : L.all) {
    Truth t = L.truth(c);
    if (!t.failed) L.best_score = std::max(L.best_score, score(L.scoring, t.metrics, L.best_durations).final_score);
  }
}

// The race model. Units: seconds for a fixed request set on one device.
Landscape race_landscape() {
  Landscape L;
  L.name = "race";
  L.space = parse_space(R"(
weight_bits: {type: choice, values: [16, 8, 4]}
weight_group_size: {type: choice, values: [32, 64, 128], when: {weight_bits: [8, 4]}}
attn_weight_bits: {type: choice, values: [0, 16, 8]}
kv_cache_dtype: {type: choice, values: [bf16, fp16, fp8_e4m3, fp8_e5m2]}
max_running_requests: {type: pow2, low: 1, high: 128}
max_prefill_tokens: {type: pow2, low: 64, high: 4096}
cuda_graphs: {type: bool}
cuda_graph_max_bs: {type: pow2, low: 1, high: 256, when: {cuda_graphs: [true]}}
)");
  L.reference = {{"weight_bits", int64_t{16}}, {"weight_group_size", int64_t{128}}, {"attn_weight_bits", int64_t{0}},
                 {"kv_cache_dtype", std::string("bf16")}, {"max_running_requests", int64_t{64}},
                 {"max_prefill_tokens", int64_t{2048}}, {"cuda_graphs", true}, {"cuda_graph_max_bs", int64_t{32}}};
  L.truth = [](const Config& c) {
    Truth t;
    const int64_t wb = geti(c, "weight_bits", 16), group = geti(c, "weight_group_size", 128);
    const int64_t ab = geti(c, "attn_weight_bits", 0) == 0 ? wb : geti(c, "attn_weight_bits", 0);
    const std::string kv = gets(c, "kv_cache_dtype", "bf16");
    const double mrr = static_cast<double>(geti(c, "max_running_requests", 64));
    const double mpt = static_cast<double>(geti(c, "max_prefill_tokens", 2048));
    const bool graphs = getb(c, "cuda_graphs", true);
    const double gbs = graphs ? static_cast<double>(geti(c, "cuda_graph_max_bs", 32)) : 0;
    auto eff_bits = [&](int64_t b) { return b >= 16 ? 16.0 : b + 16.0 / static_cast<double>(group); };
    const double bits = 0.75 * eff_bits(wb) + 0.25 * eff_bits(ab);        // attention projections: 1/4
    const double weight_gb = 18.0 * bits / 16;
    const bool fp8 = kv.rfind("fp8", 0) == 0;
    const double kv_bytes = fp8 ? 1 : 2;
    // Online dequantisation: 8-bit weights pay more per byte saved than 4-bit ones (as seen in the race).
    const double dequant = (wb == 8 ? 0.30 : wb == 4 ? 0.08 : 0.0) + (ab != wb && ab < 16 ? 0.05 : 0.0);
    const double kv_read = fp8 ? 0.9 : 1.0;
    const double kv_dequant = fp8 ? 0.06 : 0.0;                             // unfused FP8 KV: slower decode
    // Memory: 80 GB device, 0.35 GB of KV per running sequence in 16 bits. Too many sequences: OOM.
    const double kv_gb = 0.35 * kv_bytes / 2 * mrr;
    const double prefill_gb = mpt / 4096.0 * 6.0;
    if (weight_gb + kv_gb + prefill_gb > 70.0) t.failed = true;
    // CUDA-graph capture at a large batch crashes with FP8 E5M2 KV.
    if (graphs && gbs >= 128 && kv == "fp8_e5m2") t.failed = true;
    auto graph_gain = [&](double batch) { return graphs ? (gbs >= batch ? 0.80 : 0.80 + 0.2 * (1 - gbs / batch)) : 1.0; };
    const double prefill_chunk = 1.0 + 0.25 * std::sqrt(256.0 / mpt);      // small chunks: more steps
    const double step = weight_gb / 18.0 + dequant;
    t.metrics.duration_s[0] = 100.0 * (0.15 + 0.85 * step * graph_gain(1)) * (1 + kv_dequant) * (0.97 + 0.03 * prefill_chunk);
    const double b8 = std::min(mrr, 8.0);
    t.metrics.duration_s[1] = 60.0 * (8.0 / b8) * (0.2 + 0.8 * step * graph_gain(b8)) *
                              (0.8 + 0.2 * kv_read + kv_dequant) * (0.9 + 0.1 * prefill_chunk);
    const double binf = mrr;
    t.metrics.duration_s[2] = 40.0 * (0.25 + 64.0 / (binf + 8.0) * 0.15) * (0.3 + 0.7 * step * graph_gain(binf)) *
                              (0.6 + 0.4 * kv_read + kv_dequant) * prefill_chunk;
    // Accuracy: quantisation penalties; 16-bit attention projections recover part of it.
    double pen = 0;
    const double wpen = wb == 4 ? (group == 32 ? 1.5 : group == 64 ? 2.0 : 2.7) : wb == 8 ? 0.25 : 0.0;
    const double apen = ab == 4 ? 2.0 : ab == 8 ? 0.2 : 0.0;
    pen += 0.75 * wpen + 0.25 * apen + (ab < wb ? 0.3 : 0.0);
    pen += kv == "fp8_e4m3" ? 0.35 : kv == "fp8_e5m2" ? 0.8 : kv == "fp16" ? 0.05 : 0.0;
    t.metrics.relative_accuracy_pct = 100.0 - pen;
    return t;
  };
  finish(L);
  return L;
}

// Replay: rows of search/bench/data/tiny_engine_trials.csv. Columns: the space's knobs, then d_c1, d_c8,
// d_cinf, accuracy_pct, failed. The space is every column's set of values (as choices).
bool replay_landscape(const std::string& path, Landscape* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  {
    std::stringstream ss(line);
    std::string f;
    while (std::getline(ss, f, ',')) header.push_back(f);
  }
  const int nk = static_cast<int>(header.size()) - 5;
  auto table = std::make_shared<std::map<std::string, Truth>>();
  std::vector<std::set<std::string>> values(static_cast<size_t>(nk));
  std::vector<std::vector<std::string>> order(static_cast<size_t>(nk));
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string x;
    while (std::getline(ss, x, ',')) f.push_back(x);
    if (static_cast<int>(f.size()) != nk + 5) continue;
    Config c;
    for (int k = 0; k < nk; ++k) {
      c[header[k]] = value_from_text(f[k]);
      if (values[k].insert(f[k]).second) order[k].push_back(f[k]);
    }
    Truth t;
    for (int k = 0; k < kTiers; ++k) t.metrics.duration_s[k] = std::stod(f[nk + k]);
    t.metrics.relative_accuracy_pct = std::stod(f[nk + 3]);
    t.failed = f[nk + 4] == "1" || f[nk + 4] == "true";
    (*table)[config_key(c)] = t;
  }
  std::string yaml;
  for (int k = 0; k < nk; ++k) {
    yaml += header[k] + ": {type: choice, values: [";
    for (size_t i = 0; i < order[k].size(); ++i) yaml += (i ? ", " : "") + order[k][i];
    yaml += "]}\n";
  }
  Landscape L;
  L.name = "replay";
  L.space = parse_space(yaml);
  for (int k = 0; k < nk; ++k) L.reference[header[k]] = value_from_text(order[k][0]);
  L.duration_noise = 0;   // the table's values are already measurements
  L.accuracy_noise = 0;
  L.truth = [table](const Config& c) {
    auto it = table->find(config_key(c));
    if (it == table->end()) return Truth{true, {}};
    return it->second;
  };
  finish(L);
  *out = std::move(L);
  return true;
}

Observation measure(const Landscape& L, const Config& c, std::mt19937_64& rng) {
  Observation o;
  o.config = c;
  const Truth t = L.truth(c);
  if (t.failed) {
    o.outcome = Outcome::kFailed;
    o.failure = FailureKind::kOutOfMemory;
    return o;
  }
  std::normal_distribution<double> n(0, 1);
  o.outcome = Outcome::kComplete;
  o.metrics = t.metrics;
  for (double& d : o.metrics.duration_s) d *= std::exp(L.duration_noise * n(rng));
  o.metrics.relative_accuracy_pct = std::min(100.0, o.metrics.relative_accuracy_pct + L.accuracy_noise * n(rng));
  return o;
}

double true_score(const Landscape& L, const Config& c) {
  const Truth t = L.truth(c);
  return t.failed ? 0.0 : score(L.scoring, t.metrics, L.best_durations).final_score;
}

// Trials (including the reference) until a config within 1% of the best achievable is evaluated; budget+1
// when never.
int run_strategy(const Landscape& L, Strategy& s, uint64_t seed, int budget, double* ask_ms) {
  SearchProblem p;
  p.space = L.space;
  p.scoring = L.scoring;
  p.reference = L.reference;
  p.seed = seed;
  std::vector<Observation> hist;
  std::mt19937_64 noise(seed * 31 + 7);
  double total_ms = 0;
  int asks = 0;
  for (int trial = 1; trial <= budget; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    auto sug = s.ask(p, hist, 1);
    total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++asks;
    if (sug.empty()) break;
    hist.push_back(measure(L, sug[0].config, noise));
    if (true_score(L, sug[0].config) >= g_target * L.best_score) {
      if (ask_ms) *ask_ms = total_ms / asks;
      return trial;
    }
  }
  if (ask_ms) *ask_ms = total_ms / std::max(asks, 1);
  return budget + 1;
}

// Random: the random strategy's sampling (Space::sample, no repeats), simulated here with a hash set because
// the strategy re-reads the whole history on every ask (quadratic over thousands of trials).
int run_random(const Landscape& L, uint64_t seed, int budget) {
  std::mt19937_64 rng(seed);
  std::set<std::string> seen{config_key(L.space.canonical(L.reference, L.reference))};
  if (true_score(L, L.reference) >= g_target * L.best_score) return 1;
  int trial = 1, misses = 0;
  while (trial < budget && misses < 100000) {
    const Config c = L.space.canonical(L.space.sample(rng), L.reference);
    if (!seen.insert(config_key(c)).second) {
      ++misses;
      continue;
    }
    ++trial;
    if (true_score(L, c) >= g_target * L.best_score) return trial;
  }
  return budget + 1;
}

// Grid: a coarse grid (each numeric parameter at up to 4 evenly spread levels), in a seeded random order.
int run_grid(const Landscape& L, uint64_t seed, int budget) {
  std::vector<Config> grid;
  std::set<std::string> keys;
  std::function<void(size_t, Config)> rec = [&](size_t i, Config c) {
    if (i == L.space.params().size()) {
      Config k = L.space.canonical(c, L.reference);
      if (keys.insert(config_key(k)).second) grid.push_back(k);
      return;
    }
    const ParamSpec& p = L.space.params()[i];
    if (!L.space.active(p, c)) return rec(i + 1, c);
    const auto d = p.domain();
    std::vector<Value> levels;
    if (p.type == ParamType::kChoice || p.type == ParamType::kBool || d.size() <= 4) {
      levels = d;
    } else {
      for (int j = 0; j < 4; ++j) levels.push_back(d[static_cast<size_t>(std::llround(j * (d.size() - 1) / 3.0))]);
    }
    for (const Value& v : levels) {
      c[p.name] = v;
      rec(i + 1, c);
    }
  };
  rec(0, {});
  std::mt19937_64 rng(seed);
  std::shuffle(grid.begin(), grid.end(), rng);
  const std::string ref_key = config_key(L.space.canonical(L.reference, L.reference));
  int trial = 1;
  if (true_score(L, L.reference) >= g_target * L.best_score) return 1;
  for (const Config& c : grid) {
    if (config_key(c) == ref_key) continue;
    if (++trial > budget) break;
    if (true_score(L, c) >= g_target * L.best_score) return trial;
  }
  return budget + 1;
}

double median(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double load_average() {
  double l = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = 0;
    std::fclose(f);
  }
  return l;
}

void timing(const Landscape& L, int n_obs) {
  SearchProblem p;
  p.space = L.space;
  p.scoring = L.scoring;
  p.reference = L.reference;
  p.seed = 1;
  std::mt19937_64 rng(5), noise(6);
  std::vector<Observation> hist;
  std::set<std::string> keys;
  hist.push_back(measure(L, L.reference, noise));
  keys.insert(config_key(L.space.canonical(L.reference, L.reference)));
  while (static_cast<int>(hist.size()) < n_obs) {
    Config c = L.space.canonical(L.space.sample(rng), L.reference);
    if (keys.insert(config_key(c)).second) hist.push_back(measure(L, c, noise));
  }
  auto s = make_bayes_strategy();
  std::vector<double> ms, cpu;
  for (int r = 0; r < 5; ++r) {
    const double c0 = thread_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    auto sug = s->ask(p, hist, 1);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(thread_cpu_ms() - c0);
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu.begin(), cpu.end());
  const auto t0 = std::chrono::steady_clock::now();
  SurrogateModels models(p, hist);
  const double fit_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("timing %-7s model fit alone (4 GPs + failure model) at %d trials: %.1f ms\n", L.name.c_str(), n_obs, fit_ms);
  std::printf("timing %-7s suggestion at %d observed trials: median %.1f ms wall (min %.1f, max %.1f), "
              "%.1f ms thread CPU, 1 thread; load average %.1f\n",
              L.name.c_str(), n_obs, ms[2], ms[0], ms[4], cpu[2], load_average());
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string which = "all", csv, export_path;
  std::string replay_path = std::string("search/bench/data/tiny_engine_trials.csv");
  int seeds = 20, budget = 100, random_budget = 3000;
  bool timing_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--landscape") which = next();
    else if (a == "--seeds") seeds = std::stoi(next());
    else if (a == "--budget") budget = std::stoi(next());
    else if (a == "--random-budget") random_budget = std::stoi(next());
    else if (a == "--csv") csv = next();
    else if (a == "--replay-table") replay_path = next();
    else if (a == "--export-landscape") export_path = next();
    else if (a == "--timing-only") timing_only = true;
    else if (a == "--within") g_target = 1.0 - std::stod(next()) / 100.0;
    else {
      std::fprintf(stderr, "usage: bo_bench [--landscape race|replay|all] [--seeds N] [--budget N] "
                           "[--random-budget N] [--csv PATH] [--replay-table PATH] [--export-landscape PATH] "
                           "[--timing-only] [--within PCT]\n");
      return 2;
    }
  }
  std::vector<Landscape> ls;
  if (which == "race" || which == "all") ls.push_back(race_landscape());
  if (which == "replay" || which == "all") {
    Landscape r;
    if (replay_landscape(replay_path, &r)) ls.push_back(std::move(r));
    else std::printf("replay: no table at %s, skipped\n", replay_path.c_str());
  }
  if (!export_path.empty()) {
    // Every config with its noiseless truth, for the BoTorch peer (scripts/botorch_peer.py).
    std::ofstream o(export_path);
    const Landscape& L = ls.front();
    for (const ParamSpec& p : L.space.params()) o << p.name << ',';
    o << "d_c1,d_c8,d_cinf,accuracy_pct,failed,true_score\n";
    for (const Config& c : L.all) {
      for (const ParamSpec& p : L.space.params()) {
        auto it = c.find(p.name);
        o << (it == c.end() ? std::string("") : to_text(it->second)) << ',';
      }
      const Truth t = L.truth(c);
      o << t.metrics.duration_s[0] << ',' << t.metrics.duration_s[1] << ',' << t.metrics.duration_s[2] << ','
        << t.metrics.relative_accuracy_pct << ',' << (t.failed ? 1 : 0) << ',' << true_score(L, c) << '\n';
    }
    std::printf("exported %zu configs of %s to %s (best %.3f)\n", L.all.size(), L.name.c_str(), export_path.c_str(),
                L.best_score);
    return 0;
  }
  FILE* out = csv.empty() ? nullptr : std::fopen(csv.c_str(), "w");
  if (out) std::fprintf(out, "landscape,strategy,seed,trials_to_1pct,mean_ask_ms\n");
  for (const Landscape& L : ls) {
    int failing = 0, within = 0;
    for (const Config& c : L.all) {
      failing += L.truth(c).failed;
      within += true_score(L, c) >= g_target * L.best_score;
    }
    std::printf("landscape %s: %zu configs, %d failing, %d within %.0f%% of the best gated score %.3f\n",
                L.name.c_str(), L.all.size(), failing, within, 100 * (1 - g_target), L.best_score);
    if (!timing_only) {
      std::map<std::string, std::vector<int>> res;
      double bayes_ms = 0;
      for (int s = 0; s < seeds; ++s) {
        const uint64_t seed = 1000 + static_cast<uint64_t>(s);
        auto b = make_bayes_strategy();
        double ms = 0;
        res["bayes"].push_back(run_strategy(L, *b, seed, budget, &ms));
        bayes_ms += ms / seeds;
        res["random"].push_back(run_random(L, seed, random_budget));
        res["grid"].push_back(run_grid(L, seed, random_budget));
        if (out) {
          std::fprintf(out, "%s,bayes,%llu,%d,%.2f\n", L.name.c_str(), (unsigned long long)seed, res["bayes"].back(), ms);
          std::fprintf(out, "%s,random,%llu,%d,\n", L.name.c_str(), (unsigned long long)seed, res["random"].back());
          std::fprintf(out, "%s,grid,%llu,%d,\n", L.name.c_str(), (unsigned long long)seed, res["grid"].back());
        }
      }
      for (const char* name : {"bayes", "random", "grid"}) {
        const auto& v = res[name];
        const int lim = std::string(name) == "bayes" ? budget : random_budget;
        const int missed = static_cast<int>(std::count_if(v.begin(), v.end(), [&](int x) { return x > lim; }));
        std::printf("  %-6s median trials to target: %6.1f  (min %d, max %d, not reached within %d: %d of %d)\n", name,
                    median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), lim,
                    missed, seeds);
      }
      std::printf("  random / bayes: %.1fx; mean bayes suggestion %.1f ms\n", median(res["random"]) / median(res["bayes"]),
                  bayes_ms);
    }
    timing(L, std::min<int>(300, static_cast<int>(L.all.size()) - 1));
  }
  if (out) std::fclose(out);
  return 0;
}
