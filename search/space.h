// The search space: which launch knobs a job varies and over which values. Parsed from the job spec's
// `space:` mapping; every error names the field, e.g. `space.weight_bits.values[2]: 5 is not one of 16, 8, 4`.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/knob_value.h"
#include "core/status.h"

namespace soartune::search {

enum class ParamType { kChoice, kInt, kLogInt, kPow2, kBool };

// Domains are enumerated; an int range with more values than this is refused at parse time (use pow2 or a
// narrower range). The catalogue's widest knob (max_prefill_tokens, 16..131072) needs pow2.
inline constexpr int64_t kMaxDomainSize = 4096;
// cardinality() counts exactly (conditions included) up to this many full assignments, else returns the bound.
inline constexpr double kExactCountLimit = 1e5;

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kChoice;
  std::vector<Value> choices;        // kChoice: the allowed values, in the order given
  int64_t low = 0, high = 0;         // kInt / kLogInt / kPow2: inclusive bounds (powers of two for kPow2)
  // Conditional parameter: active only when every named parameter has one of the listed values.
  std::map<std::string, std::vector<Value>> when;

  // Every value this parameter can take (ints and powers of two enumerated; bounded by the validator).
  std::vector<Value> domain() const;
};

class Space {
 public:
  // Parses and validates `space:`. Unknown knobs, bad types, empty or out-of-catalogue values, `when` clauses
  // naming unknown parameters or impossible values: all errors naming the field.
  static Result<Space> parse(const YAML::Node& node, const std::string& field = "space");

  const std::vector<ParamSpec>& params() const { return params_; }
  const ParamSpec* find(const std::string& name) const;

  // Whether `name` is active in config `c` (its `when` clause holds).
  bool active(const ParamSpec& p, const Config& c) const;
  // Drops inactive parameters; fills missing active ones from `defaults` (then the catalogue default). The
  // result holds exactly the space's active parameters: knobs outside the space are dropped too, so that
  // config_key(canonical(...)) says whether two trials searched the same point.
  Config canonical(const Config& c, const Config& defaults) const;
  // Checks that every value is in its domain and every active parameter is set; names the offending field.
  Status validate(const Config& c, const std::string& field = "config") const;

  // Uniform over each active parameter's domain (log-uniform for log-scale ints: each octave equally likely).
  Config sample(std::mt19937_64& rng) const;
  // Number of distinct canonical configs: exact without conditions or when at most kExactCountLimit; else the
  // product of the domain sizes (an upper bound).
  double cardinality() const;
  // The distinct canonical configs in lexicographic order of the domains, at most `limit` of them (for grid
  // search and for finding the unobserved rest of a nearly exhausted space).
  std::vector<Config> enumerate(size_t limit) const;

 private:
  std::vector<ParamSpec> params_;              // in dependency order: a `when` names only earlier params
};

}  // namespace soartune::search
