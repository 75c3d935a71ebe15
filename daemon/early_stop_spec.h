// A job's `early_stop:` section (docs/FORMATS.md section 2): the rule the runner applies to running trials
// (daemon/early_stop.h, search/early_stop.h). Errors name the field and the allowed values.
#pragma once

#include <optional>

#include <yaml-cpp/yaml.h>

#include "core/status.h"
#include "search/early_stop.h"

namespace soartune::daemon {

// The allowed ranges of `early_stop:`.
inline constexpr int kMaxEarlyStopAfterTiers = 2;   // after the last tier nothing is left to save
inline constexpr double kMaxEarlyStopMarginPct = 100;

// `early_stop: {after_tiers, margin_pct}`: nullopt when absent or null; the measured rule's values (1, 5) for
// missing keys.
soartune::Result<std::optional<search::EarlyStopRule>> parse_early_stop(const YAML::Node& n);

}  // namespace soartune::daemon
