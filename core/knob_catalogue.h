// The launch-knob catalogue (docs/FORMATS.md section 1): every knob a trial can vary, its type, the values it
// may take, its reference default and the equivalent SGLang server flag. The search space, the job spec's
// `reference:` / `fixed:` and the exported launch configs are all checked against it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/knob_value.h"
#include "core/status.h"

namespace soartune::core {

enum class KnobType { kInt, kString, kBool };

struct KnobSpec {
  std::string name;
  KnobType type = KnobType::kInt;
  // Allowed values. Enumerated knobs list them (in catalogue order); range knobs (ints) set `is_range` and
  // allow every integer in [low, high]. `gemv_variant` is open: "auto" or any kernel name made of [a-z0-9_]
  // (the engine checks the name against its dispatch table before a worker starts).
  std::vector<Value> values;
  bool is_range = false;
  int64_t low = 0, high = 0;
  bool open_names = false;
  Value default_value;
  std::string description;
  std::string sglang;    // equivalent SGLang flag(s); empty where there is none
  std::string sglang_note;   // how the value maps onto the flag ("value / 100", "negated", ...); may be empty

  bool allows(const Value& v) const;
  // "16, 8, 4", "50..95", "true, false" or "auto, or a kernel name of [a-z0-9_]".
  std::string allowed_text() const;
};

// Every knob, in the order of docs/FORMATS.md.
const std::vector<KnobSpec>& launch_knobs();
// nullptr when `name` is not a knob.
const KnobSpec* find_knob(std::string_view name);
// "weight_bits, weight_group_size, ...", for error messages.
std::string known_knob_names();

// Reads a value for `knob` from text (a YAML scalar): ints for int knobs, true/false for bool knobs, the text
// itself for string knobs. Checks it against the catalogue. Error: "<field>: <text> is not one of <allowed>".
Result<Value> knob_value_from_text(const KnobSpec& knob, const std::string& text, const std::string& field);
// Checks that a value has the knob's type and is allowed. Unknown knob: "<field>: unknown knob; known knobs: ..."
Status validate_knob(const std::string& name, const Value& v, const std::string& field);
// Checks every entry of a launch config; fields are "<field>.<knob>".
Status validate_launch(const Config& c, const std::string& field = "launch");

// Reads a launch config from text (what the store and the API carry), each value the way its knob reads it, so
// that a config survives a round trip through text unchanged. Fields are "<field>.<knob>".
Result<Config> launch_config_from_text(const std::map<std::string, std::string>& m,
                                       const std::string& field = "launch");
// Reads a mapping of knob -> scalar (the job spec's `reference:` and `fixed:`, trial.yaml's `launch:`); a null or
// absent node is an empty config.
Result<Config> launch_config_from_yaml(const YAML::Node& node, const std::string& field = "launch");

// The catalogue defaults: the reference config when the job spec says nothing.
Config default_config();
// Defaults overlaid with `overrides` (e.g. the job spec's `reference:`), every override validated.
Result<Config> reference_config(const Config& overrides, const std::string& field = "reference");

}  // namespace soartune::core
