// The serving engine a job's winner is exported for (upstream SGLang or the race's MiniCPM fork): its server
// flags as data (configs/serving/<engine>-flags.yaml, compiled in), the fixed base flags a job passes through
// (`serving:` in the job spec), and the race's rules on them. A command line is checked flag by flag: a flag the
// engine does not have, a missing or surplus value, a value outside a choice or of the wrong type is refused
// naming the token.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/status.h"

namespace soartune::search {

enum class ServingEngine { kSglangUpstream, kSglangMinicpm };

// "sglang-upstream" | "sglang-minicpm". Error: "<field>: x is not one of sglang-upstream, sglang-minicpm".
Result<ServingEngine> parse_serving_engine(const std::string& text, const std::string& field);
const char* to_string(ServingEngine e);

struct ServerFlag {
  std::string name;                    // "--page-size"
  bool takes_value = false;
  std::string type;                    // "int", "float", "str" (takes_value only)
  std::vector<std::string> choices;    // empty: any value of `type`
  bool many = false;                   // nargs "+": one or more values
};

// One engine's flags; aliases resolve to the flag they name.
class FlagList {
 public:
  // Parses a flag-list file (the format of configs/serving/*-flags.yaml). `what` names it in errors.
  static Result<FlagList> parse(const std::string& yaml_text, const std::string& what);
  // nullptr when the engine has no such flag.
  const ServerFlag* find(const std::string& name) const;
  // The flag an alias stands for ("--tp-size" -> "--tensor-parallel-size"); the name itself otherwise.
  std::string canonical(const std::string& name) const;
  size_t size() const { return flags_.size(); }

 private:
  std::map<std::string, ServerFlag> flags_;
  std::map<std::string, std::string> aliases_;
};

// The compiled-in list of `engine`.
const FlagList& flag_list(ServingEngine engine);

// One flag of a command line with its values.
struct ParsedFlag {
  std::string flag;                    // canonical name
  std::vector<std::string> values;     // empty for a switch
};

// Splits `tokens` (one argv entry each; "--flag=value" accepted) into flags with their values, checking each
// against `flags`. Errors name "<field>[i]" and the token, e.g.
//   "serving.base_args[3]: --radix-cache is not a flag of sglang-minicpm".
Result<std::vector<ParsedFlag>> parse_server_args(const FlagList& flags, const std::vector<std::string>& tokens,
                                                  const std::string& field, const std::string& engine_name);

// The job spec's `serving:` section.
struct ServingSpec {
  ServingEngine engine = ServingEngine::kSglangUpstream;
  std::vector<std::string> base_args;  // argv tokens, passed through before the tuned flags
};

// The base flags a race launch line carries when `base_args` is not given.
std::vector<std::string> default_base_args(ServingEngine engine);

// Parses and validates `serving: {engine, base_args}` (see docs/FORMATS.md): every base flag known to the
// engine with a valid value, none set twice, none that a launch knob sets (those are tuned or fixed through
// the knobs, so that a tuned flag never duplicates or contradicts a base flag), and the race's rules.
Result<ServingSpec> parse_serving(const YAML::Node& node, const std::string& field = "serving");

// The race's rules on a full command line of `engine`: the MiniCPM race is run with the radix cache off, so
// `--disable-radix-cache` must be present.
Status check_race_rules(ServingEngine engine, const std::vector<ParsedFlag>& args, const std::string& field);

// The flag's values in a parsed command line; nullptr when absent.
const std::vector<std::string>* flag_values(const std::vector<ParsedFlag>& args, const std::string& flag);

}  // namespace soartune::search
