// The launch-knob catalogue: every knob a trial can vary, once. For each: its type, the values it may take, its
// reference default, what it means, which backend honours it, the CLI's short column name, how its value reaches
// the serving engine (SGLang) and where it lives in the typed LaunchConfig. The job spec, the search space, the
// trial file, the worker, the store, the CLI and the exporter all read this table; none keeps a copy.
// Adding a knob = one entry in knob_catalogue.cc + a LaunchConfig field + the code that uses it + its tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/knob_value.h"
#include "core/launch_config.h"
#include "core/status.h"

namespace soartune::core {

enum class KnobType { kInt, kString, kBool };

// Which backend's kernels a knob changes; the other backend accepts and records it and changes nothing.
enum class KnobBackend { kAll, kCuda };

// How a knob's value reaches the serving engine's command line.
struct ServingFlag {
  enum class Rule {
    kNone,          // no counterpart: the export lists it as unmapped, with `note` as the reason
    kCheckpoint,    // lives in the quantised checkpoint, not in a flag (the export lists it, with `note`)
    kValue,         // each of `flags`, followed by the value (or its `value_map` entry; "" there omits the flag)
    kPercent,       // each of `flags`, followed by value / 100 with two decimals
    kDisableSwitch, // a bool: false -> the bare flag, true -> nothing
    kModelConfig,   // lives in the checkpoint's config.json at `config_key`; the default value keeps the model's
  };
  Rule rule = Rule::kNone;
  std::vector<std::string> flags;
  std::map<std::string, std::string> value_map;    // value text -> flag argument
  std::map<std::string, std::string> value_notes;  // value text -> caveat told with the export
  std::string note;                                // why unmapped / what the checkpoint must hold
  std::string requires_true;                       // a bool knob that must be true for this flag to apply
  // The attention backend (SGLang's --attention-backend / --decode-attention-backend) the flag needs; with any
  // other backend the export lists the knob as unmapped, with `note`.
  std::string requires_attention_backend;
  // kDisableSwitch: the attention backends under which the switch exists (any of them); with another the
  // export lists the knob as unmapped, with `note`. Empty: any backend.
  std::vector<std::string> requires_any_attention_backend;
  // kModelConfig: dotted path into the checkpoint's config.json ("sparse_config.topk").
  std::string config_key;
  // Values the serving engine cannot be given (value text -> why). The job spec refuses them in `space:`,
  // `fixed:` and `reference:` when the job names a serving target, so the search never proposes them.
  std::map<std::string, std::string> cannot_export;
};

struct KnobSpec {
  std::string name;
  std::string short_name;                // CLI column header
  KnobType type = KnobType::kInt;
  // Allowed values. Enumerated knobs list them (in catalogue order); range knobs (ints) set `is_range` and
  // allow every integer in [low, high].
  std::vector<Value> values;
  bool is_range = false;
  int64_t low = 0, high = 0;
  Value default_value;
  std::string description;
  KnobBackend backend = KnobBackend::kAll;
  ServingFlag serving;
  // The typed field behind the knob.
  Value (*get)(const LaunchConfig&) = nullptr;
  void (*set)(LaunchConfig&, const Value&) = nullptr;   // only ever given a value `allows` accepted

  bool allows(const Value& v) const;
  // "16, 8, 4", "50..95" or "true, false".
  std::string allowed_text() const;
};

// Every knob, in the order of docs/FORMATS.md.
const std::vector<KnobSpec>& launch_knobs();
// nullptr when `name` is not a knob.
const KnobSpec* find_knob(std::string_view name);
// "weight_bits, weight_group_size, ...", for error messages.
std::string known_knob_names();

// The bits a `layer_overrides` entry may take (the weight_bits knob's values).
const std::vector<Value>& layer_override_bits();

// The one wording of a rejected value, whichever layer checks it:
//   "<field>: <value> is not one of <allowed>" / "<field>: <value> is not in <low>..<high>".
Status disallowed(const KnobSpec& knob, const std::string& value_text, const std::string& field);
// "<field>: unknown knob; known knobs: ...".
Status unknown_knob(const std::string& field);

// Reads a value for `knob` from text (a YAML scalar): ints for int knobs, true/false for bool knobs, the text
// itself for string knobs, and checks it against the catalogue.
Result<Value> knob_value_from_text(const KnobSpec& knob, const std::string& text, const std::string& field);
// Checks that a value has the knob's type and is allowed (the same message as knob_value_from_text).
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

// Why `knob` = `value` cannot be exported to the serving engine (its ServingFlag::cannot_export entry); empty
// when it can.
std::string serving_export_refusal(const KnobSpec& knob, const Value& value);

// The checkpoint config.json entries `launch` sets: every kModelConfig knob away from its default (which keeps
// the model's own value), as its config_key -> value, e.g. {"sparse_config.topk": 32}. The bundle's checkpoint
// carries them (soartune-worker --write-checkpoint); the exporter names them.
std::map<std::string, Value> model_config_overrides(const Config& launch);
// `launch` as a knob -> value config (every knob, read through the catalogue's accessors).
Config config_of(const LaunchConfig& launch);

// The catalogue defaults: the reference config when the job spec says nothing.
Config default_config();
// Defaults overlaid with `overrides` (e.g. the job spec's `reference:`), every override validated.
Result<Config> reference_config(const Config& overrides, const std::string& field = "reference");

}  // namespace soartune::core
