#include "search/scoring.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

namespace soartune::search {

namespace {

int tier_index(const std::string& name) {
  for (int t = 0; t < kTiers; ++t)
    if (name == kTierNames[t]) return t;
  return -1;
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string tier_list() { return std::string(kTierNames[0]) + ", " + kTierNames[1] + ", " + kTierNames[2]; }

Result<double> read_number(const YAML::Node& node, const std::string& field) {
  if (!node.IsDefined() || node.IsNull()) return Status::Invalid(field + ": missing");
  if (!node.IsScalar()) return Status::Invalid(field + ": must be a number");
  try {
    const double v = node.as<double>();
    if (!std::isfinite(v)) return Status::Invalid(field + ": " + node.Scalar() + " is not a finite number");
    return v;
  } catch (const YAML::Exception&) {
    return Status::Invalid(field + ": " + node.Scalar() + " is not a number");
  }
}

Status check_keys(const YAML::Node& node, const std::string& field, const std::set<std::string>& allowed,
                  const std::string& allowed_text) {
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    if (!allowed.count(key)) return Status::Invalid(field + "." + key + ": unknown key; allowed: " + allowed_text);
  }
  return Status::Ok();
}

// Reads a {c1, c8, cinf} mapping of numbers; missing tiers stay nullopt.
Result<std::array<std::optional<double>, kTiers>> read_tiers(const YAML::Node& node, const std::string& field) {
  if (!node.IsMap()) return Status::Invalid(field + ": must be a mapping with keys from " + tier_list());
  std::array<std::optional<double>, kTiers> out;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const int t = tier_index(key);
    if (t < 0) return Status::Invalid(field + "." + key + ": unknown tier; allowed: " + tier_list());
    Result<double> v = read_number(kv.second, field + "." + key);
    if (!v.ok()) return v.status();
    out[t] = v.value();
  }
  return out;
}

}  // namespace

Result<ScoringSpec> ScoringSpec::parse(const YAML::Node& node, const std::string& field) {
  ScoringSpec spec;
  if (!node.IsDefined() || node.IsNull()) return spec;
  if (!node.IsMap()) return Status::Invalid(field + ": must be a mapping with keys weights, gate, targets_s");
  if (Status s = check_keys(node, field, {"weights", "gate", "targets_s"}, "weights, gate, targets_s"); !s.ok())
    return s;

  if (const YAML::Node w = node["weights"]; w.IsDefined() && !w.IsNull()) {
    auto tiers = read_tiers(w, field + ".weights");
    if (!tiers.ok()) return tiers.status();
    double sum = 0;
    for (int t = 0; t < kTiers; ++t) {
      const double v = tiers.value()[t].value_or(0.0);   // a tier left out of `weights` does not count
      if (v < 0)
        return Status::Invalid(field + ".weights." + kTierNames[t] + ": " + num(v) + " is negative");
      // Weights are relative; a cap keeps their sum, and every score built on them, finite.
      if (v > 1000)
        return Status::Invalid(field + ".weights." + kTierNames[t] + ": " + num(v) + " is out of range; allowed: 0..1000");
      spec.weights[t] = v;
      sum += v;
    }
    if (!(sum > 0)) return Status::Invalid(field + ".weights: must sum to more than 0");
  }

  if (const YAML::Node g = node["gate"]; g.IsDefined() && !g.IsNull()) {
    const std::string gf = field + ".gate";
    if (!g.IsSequence() || g.size() == 0)
      return Status::Invalid(gf + ": must be a non-empty list of {above: <percent>, c: <multiplier>}");
    spec.gate.clear();
    for (size_t i = 0; i < g.size(); ++i) {
      const std::string f = gf + "[" + std::to_string(i) + "]";
      if (!g[i].IsMap()) return Status::Invalid(f + ": must be a mapping {above: <percent>, c: <multiplier>}");
      if (Status s = check_keys(g[i], f, {"above", "c"}, "above, c"); !s.ok()) return s;
      Result<double> above = read_number(g[i]["above"], f + ".above");
      if (!above.ok()) return above.status();
      Result<double> c = read_number(g[i]["c"], f + ".c");
      if (!c.ok()) return c.status();
      // Relative accuracy is capped at 100, so "above 100" could never hold.
      if (above.value() >= 100) return Status::Invalid(f + ".above: must be below 100 (accuracy is capped at 100)");
      if (!(c.value() > 0 && c.value() <= 1)) return Status::Invalid(f + ".c: must be in (0, 1]");
      for (const GateTier& earlier : spec.gate)
        if (earlier.above_pct == above.value())
          return Status::Invalid(f + ".above: " + g[i]["above"].Scalar() + " is given twice");
      spec.gate.push_back({above.value(), c.value()});
    }
    std::sort(spec.gate.begin(), spec.gate.end(),
              [](const GateTier& a, const GateTier& b) { return a.above_pct > b.above_pct; });
    for (size_t i = 1; i < spec.gate.size(); ++i)
      if (spec.gate[i].c > spec.gate[i - 1].c)
        return Status::Invalid(gf + ": multiplier " + num(spec.gate[i].c) + " above " +
                               num(spec.gate[i].above_pct) + " is larger than " + num(spec.gate[i - 1].c) +
                               " above " + num(spec.gate[i - 1].above_pct) +
                               "; a higher threshold must not give a smaller multiplier");
  }

  if (const YAML::Node ts = node["targets_s"]; ts.IsDefined() && !ts.IsNull()) {
    auto tiers = read_tiers(ts, field + ".targets_s");
    if (!tiers.ok()) return tiers.status();
    for (int t = 0; t < kTiers; ++t) {
      if (!tiers.value()[t]) continue;
      if (!(*tiers.value()[t] > 0))
        return Status::Invalid(field + ".targets_s." + kTierNames[t] + ": must be a positive number of seconds");
      spec.target_s[t] = tiers.value()[t];
    }
  }
  return spec;
}

double ScoringSpec::gate_multiplier(double relative_accuracy_pct) const {
  if (std::isnan(relative_accuracy_pct)) return 0;
  const double acc = std::min(relative_accuracy_pct, 100.0);
  for (const GateTier& g : gate)   // sorted by threshold, highest first
    if (acc > g.above_pct) return g.c;
  return 0;
}

std::vector<double> ScoringSpec::gate_levels() const {
  std::vector<double> levels;
  for (const GateTier& g : gate) levels.push_back(g.c);
  levels.push_back(0);
  return levels;
}

std::array<double, kTiers> reference_durations(const ScoringSpec& spec, const std::vector<TrialMetrics>& observed) {
  std::array<double, kTiers> ref;
  for (int t = 0; t < kTiers; ++t) {
    if (spec.target_s[t]) {
      ref[t] = *spec.target_s[t];
      continue;
    }
    ref[t] = std::numeric_limits<double>::quiet_NaN();   // nothing measured yet on this tier
    for (const TrialMetrics& m : observed) {
      const double d = m.duration_s[t];
      if (std::isfinite(d) && d > 0 && !(d >= ref[t])) ref[t] = d;
    }
  }
  return ref;
}

Score score(const ScoringSpec& spec, const TrialMetrics& m, const std::array<double, kTiers>& reference_s) {
  Score s;
  for (int t = 0; t < kTiers; ++t) {
    const double d = m.duration_s[t], ref = reference_s[t];
    // A tier without a valid measurement or reference scores 0 rather than poisoning the sum with NaN.
    s.tier_score[t] = (std::isfinite(d) && d > 0 && std::isfinite(ref) && ref > 0) ? 100.0 * ref / d : 0.0;
  }
  s.speed = final_score(spec, s.tier_score, 1.0);
  s.gate = spec.gate_multiplier(m.relative_accuracy_pct);
  s.final_score = final_score(spec, s.tier_score, s.gate);
  return s;
}

double final_score(const ScoringSpec& spec, const std::array<double, kTiers>& tier_score, double gate) {
  double speed = 0;
  for (int t = 0; t < kTiers; ++t) speed += spec.weights[t] * tier_score[t];
  return speed * gate;
}

}  // namespace soartune::search
