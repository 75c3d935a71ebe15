#include "daemon/early_stop_spec.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace soartune::daemon {

namespace {

// The rule measured on the replay tables (docs/PERF.md): after the first tier, 5% under the incumbent.
constexpr int kDefaultAfterTiers = 1;
constexpr double kDefaultMarginPct = 5;

}  // namespace

soartune::Result<std::optional<search::EarlyStopRule>> parse_early_stop(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return std::optional<search::EarlyStopRule>();
  if (!n.IsMap()) return Status::Invalid("early_stop: must be a mapping {after_tiers, margin_pct}");
  const std::string after_range = "early_stop.after_tiers: must be an integer in 0.." + std::to_string(kMaxEarlyStopAfterTiers) +
                                  " (the tiers measured before deciding; 0: right after the accuracy)";
  const std::string margin_range = "early_stop.margin_pct: must be a number in 0..100 (percent under the incumbent)";
  for (const auto& kv : n) {
    const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : std::string("?");
    if (k != "after_tiers" && k != "margin_pct")
      return Status::Invalid("early_stop." + k + ": unknown key; allowed: after_tiers, margin_pct");
  }
  search::EarlyStopRule rule{kDefaultAfterTiers, kDefaultMarginPct / 100};
  if (const YAML::Node a = n["after_tiers"]; a.IsDefined()) {
    int64_t v = -1;
    try {
      if (!a.IsScalar()) return Status::Invalid(after_range);
      v = a.as<int64_t>();
    } catch (const YAML::Exception&) {
      return Status::Invalid(after_range + ", got '" + a.Scalar() + "'");
    }
    if (v < 0 || v > kMaxEarlyStopAfterTiers) return Status::Invalid(after_range + ", got " + std::to_string(v));
    rule.after_tiers = static_cast<int>(v);
  }
  if (const YAML::Node m = n["margin_pct"]; m.IsDefined()) {
    double v = -1;
    try {
      if (!m.IsScalar()) return Status::Invalid(margin_range);
      v = m.as<double>();
    } catch (const YAML::Exception&) {
      return Status::Invalid(margin_range + ", got '" + m.Scalar() + "'");
    }
    if (!std::isfinite(v) || v < 0 || v > kMaxEarlyStopMarginPct) return Status::Invalid(margin_range + ", got " + m.Scalar());
    rule.margin = v / 100;
  }
  return std::optional<search::EarlyStopRule>(rule);
}

}  // namespace soartune::daemon
