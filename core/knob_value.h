// A launch config: knob name -> value. Knob values are discrete (bits, dtypes, sizes, switches), so a value is
// a bool, an integer or a string. Text form ("16", "true", "fp8_e4m3") is what the API and the store carry.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>

namespace soartune {

using Value = std::variant<bool, int64_t, std::string>;
using Config = std::map<std::string, Value>;

std::string to_text(const Value& v);
// Parses text the way YAML scalars read: true/false -> bool, integers -> int64, anything else -> string.
Value value_from_text(const std::string& text);

std::map<std::string, std::string> to_text(const Config& c);
Config config_from_text(const std::map<std::string, std::string>& m);

// A stable key for "has this config been evaluated already": sorted name=value pairs.
std::string config_key(const Config& c);

}  // namespace soartune
