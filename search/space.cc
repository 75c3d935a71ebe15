#include "search/space.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "core/knob_catalogue.h"

namespace soartune::search {

namespace {

bool is_pow2(int64_t v) { return v >= 1 && (v & (v - 1)) == 0; }

std::string join(const std::vector<Value>& values) {
  std::string out;
  for (const Value& v : values) out += (out.empty() ? "" : ", ") + to_text(v);
  return out;
}

bool contains(const std::vector<Value>& values, const Value& v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

// Number of values of an int range, without overflow for the catalogue's bounds.
int64_t range_size(const ParamSpec& p) {
  if (p.type == ParamType::kPow2) {
    int64_t n = 0;
    for (int64_t v = p.low; v <= p.high && v > 0; v *= 2) ++n;
    return n;
  }
  return p.high - p.low + 1;
}

Result<int64_t> read_int(const YAML::Node& node, const std::string& field) {
  if (!node.IsDefined() || node.IsNull()) return Status::Invalid(field + ": missing");
  if (!node.IsScalar()) return Status::Invalid(field + ": must be an integer");
  Value v = value_from_text(node.Scalar());
  if (const int64_t* i = std::get_if<int64_t>(&v)) return *i;
  return Status::Invalid(field + ": " + node.Scalar() + " is not an integer");
}

const char* type_name(ParamType t) {
  switch (t) {
    case ParamType::kChoice: return "choice";
    case ParamType::kInt: return "int";
    case ParamType::kLogInt: return "int";
    case ParamType::kPow2: return "pow2";
    case ParamType::kBool: return "bool";
  }
  return "?";
}

Status check_keys(const YAML::Node& node, const std::string& field, const std::set<std::string>& allowed) {
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    if (!allowed.count(key)) {
      std::string list;
      for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return Status::Invalid(field + "." + key + ": unknown key; allowed: " + list);
    }
  }
  return Status::Ok();
}

// Reads one parameter (without its `when`, which needs the earlier parameters).
Result<ParamSpec> parse_param(const std::string& name, const YAML::Node& node, const std::string& field) {
  const core::KnobSpec* knob = core::find_knob(name);
  if (!knob) return Status::Invalid(field + ": unknown knob; known knobs: " + core::known_knob_names());
  if (!node.IsMap()) return Status::Invalid(field + ": must be a mapping with a type (choice, int, pow2, bool)");
  const YAML::Node type_node = node["type"];
  if (!type_node.IsDefined() || !type_node.IsScalar())
    return Status::Invalid(field + ".type: missing; allowed: choice, int, pow2, bool");
  const std::string type = type_node.Scalar();

  ParamSpec p;
  p.name = name;
  if (type == "choice") {
    if (Status s = check_keys(node, field, {"type", "values", "when"}); !s.ok()) return s;
    p.type = ParamType::kChoice;
    const YAML::Node values = node["values"];
    if (!values.IsDefined() || !values.IsSequence())
      return Status::Invalid(field + ".values: missing; a list of values from " + knob->allowed_text());
    if (values.size() == 0)
      return Status::Invalid(field + ".values: empty; give at least one of " + knob->allowed_text());
    for (size_t i = 0; i < values.size(); ++i) {
      const std::string f = field + ".values[" + std::to_string(i) + "]";
      if (!values[i].IsScalar()) return Status::Invalid(f + ": must be a scalar; allowed: " + knob->allowed_text());
      Result<Value> v = core::knob_value_from_text(*knob, values[i].Scalar(), f);
      if (!v.ok()) return v.status();
      if (contains(p.choices, v.value())) return Status::Invalid(f + ": " + to_text(v.value()) + " is repeated");
      p.choices.push_back(v.value());
    }
    return p;
  }
  if (type == "bool") {
    if (Status s = check_keys(node, field, {"type", "when"}); !s.ok()) return s;
    if (knob->type != core::KnobType::kBool)
      return Status::Invalid(field + ".type: bool does not fit " + name + "; allowed values: " +
                             knob->allowed_text() + " (use type: choice)");
    p.type = ParamType::kBool;
    return p;
  }
  if (type != "int" && type != "pow2")
    return Status::Invalid(field + ".type: " + type + " is not one of choice, int, pow2, bool");

  if (knob->type != core::KnobType::kInt)
    return Status::Invalid(field + ".type: " + type + " does not fit " + name + "; allowed values: " +
                           knob->allowed_text() + " (use type: " +
                           (knob->type == core::KnobType::kBool ? "bool" : "choice") + ")");
  if (type == "int") {
    if (Status s = check_keys(node, field, {"type", "low", "high", "log", "when"}); !s.ok()) return s;
  } else {
    if (Status s = check_keys(node, field, {"type", "low", "high", "when"}); !s.ok()) return s;
  }
  Result<int64_t> low = read_int(node["low"], field + ".low");
  if (!low.ok()) return low.status();
  Result<int64_t> high = read_int(node["high"], field + ".high");
  if (!high.ok()) return high.status();
  p.low = low.value();
  p.high = high.value();
  if (type == "pow2") {
    p.type = ParamType::kPow2;
    if (!is_pow2(p.low)) return Status::Invalid(field + ".low: must be a power of two");
    if (!is_pow2(p.high)) return Status::Invalid(field + ".high: must be a power of two");
  } else {
    p.type = ParamType::kInt;
    if (const YAML::Node log = node["log"]; log.IsDefined()) {
      if (!log.IsScalar() || (log.Scalar() != "true" && log.Scalar() != "false"))
        return Status::Invalid(field + ".log: must be true or false");
      if (log.Scalar() == "true") {
        p.type = ParamType::kLogInt;
        if (p.low < 1) return Status::Invalid(field + ".low: must be at least 1 with log: true");
      }
    }
  }
  if (p.low > p.high)
    return Status::Invalid(field + ".low: " + std::to_string(p.low) + " is above high (" + std::to_string(p.high) +
                           ")");
  for (const char* bound : {"low", "high"}) {
    const int64_t v = std::string(bound) == "low" ? p.low : p.high;
    if (!knob->allows(Value{v}))
      return Status::Invalid(field + "." + bound + ": " + std::to_string(v) +
                             (knob->is_range ? " is not in " : " is not one of ") + knob->allowed_text());
  }
  if (range_size(p) > kMaxDomainSize)
    return Status::Invalid(field + ": " + std::to_string(p.low) + ".." + std::to_string(p.high) + " has " +
                           std::to_string(range_size(p)) + " values; at most " + std::to_string(kMaxDomainSize) +
                           " are allowed (use type: pow2 or a narrower range)");
  // An enumerated knob: every integer the range covers must be one of its values.
  if (!knob->is_range) {
    for (const Value& v : p.domain())
      if (!knob->allows(v))
        return Status::Invalid(field + ": " + type_name(p.type) + " " + std::to_string(p.low) + ".." +
                               std::to_string(p.high) + " includes " + to_text(v) + ", which is not one of " +
                               knob->allowed_text() + " (use type: choice" +
                               (p.type == ParamType::kPow2 ? "" : " or pow2") + ")");
  }
  return p;
}

}  // namespace

std::vector<Value> ParamSpec::domain() const {
  std::vector<Value> d;
  switch (type) {
    case ParamType::kChoice:
      return choices;
    case ParamType::kBool:
      return {false, true};
    case ParamType::kInt:
    case ParamType::kLogInt:
      for (int64_t v = low; v <= high; ++v) d.push_back(v);
      return d;
    case ParamType::kPow2:
      for (int64_t v = low; v <= high && v > 0; v *= 2) d.push_back(v);
      return d;
  }
  return d;
}

Result<Space> Space::parse(const YAML::Node& node, const std::string& field) {
  Space space;
  if (!node.IsDefined() || node.IsNull()) return space;
  if (!node.IsMap()) return Status::Invalid(field + ": must be a mapping of knob name -> parameter");
  for (const auto& kv : node) {
    const std::string name = kv.first.Scalar();
    const std::string f = field + "." + name;
    if (space.find(name)) return Status::Invalid(f + ": defined twice");
    Result<ParamSpec> p = parse_param(name, kv.second, f);
    if (!p.ok()) return p.status();
    if (const YAML::Node when = kv.second["when"]; when.IsDefined()) {
      if (!when.IsMap() || when.size() == 0)
        return Status::Invalid(f + ".when: must be a mapping of earlier parameter -> allowed values");
      for (const auto& cond : when) {
        const std::string parent_name = cond.first.Scalar();
        const std::string wf = f + ".when." + parent_name;
        const ParamSpec* parent = space.find(parent_name);
        if (!parent) {
          if (parent_name == name) return Status::Invalid(wf + ": a parameter cannot depend on itself");
          if (node[parent_name].IsDefined())
            return Status::Invalid(wf + ": must name a parameter defined before " + name);
          std::string names;
          for (const ParamSpec& q : space.params_) names += (names.empty() ? "" : ", ") + q.name;
          return Status::Invalid(wf + ": not a parameter of " + field + "; earlier parameters: " +
                                 (names.empty() ? "(none)" : names));
        }
        std::vector<YAML::Node> items;
        if (cond.second.IsSequence()) {
          for (const auto& item : cond.second) items.push_back(item);
        } else if (cond.second.IsScalar()) {
          items.push_back(cond.second);
        }
        if (items.empty()) return Status::Invalid(wf + ": must list the values of " + parent_name + " that enable " + name);
        const std::vector<Value> parent_domain = parent->domain();
        std::vector<Value> allowed;
        for (const YAML::Node& item : items) {
          if (!item.IsScalar())
            return Status::Invalid(wf + ": must list values of " + parent_name + "; allowed: " + join(parent_domain));
          const core::KnobSpec* pk = core::find_knob(parent_name);
          Result<Value> v = core::knob_value_from_text(*pk, item.Scalar(), wf);
          if (!v.ok() || !contains(parent_domain, v.value()))
            return Status::Invalid(wf + ": " + item.Scalar() + " is not a value " + parent_name + " can take; allowed: " +
                                   join(parent_domain));
          if (!contains(allowed, v.value())) allowed.push_back(v.value());
        }
        p.value().when[parent_name] = std::move(allowed);
      }
    }
    space.params_.push_back(std::move(p).value());
  }
  return space;
}

const ParamSpec* Space::find(const std::string& name) const {
  for (const ParamSpec& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

bool Space::active(const ParamSpec& p, const Config& c) const {
  for (const auto& [parent_name, values] : p.when) {
    const ParamSpec* parent = find(parent_name);
    if (!parent || !active(*parent, c)) return false;
    auto it = c.find(parent_name);
    if (it == c.end() || !contains(values, it->second)) return false;
  }
  return true;
}

Config Space::canonical(const Config& c, const Config& defaults) const {
  Config out;
  for (const ParamSpec& p : params_) {
    // `out` holds the earlier parameters already, so `when` is judged on canonical values.
    if (!active(p, out)) continue;
    if (auto it = c.find(p.name); it != c.end()) {
      out[p.name] = it->second;
    } else if (auto d = defaults.find(p.name); d != defaults.end()) {
      out[p.name] = d->second;
    } else if (const core::KnobSpec* k = core::find_knob(p.name)) {
      out[p.name] = k->default_value;
    }
  }
  return out;
}

Status Space::validate(const Config& c, const std::string& field) const {
  for (const ParamSpec& p : params_) {
    const std::string f = field + "." + p.name;
    const bool on = active(p, c);
    auto it = c.find(p.name);
    if (!on) continue;
    if (it == c.end()) return Status::Invalid(f + ": missing; allowed: " + join(p.domain()));
    const std::vector<Value> d = p.domain();
    if (!contains(d, it->second)) {
      if (p.type == ParamType::kInt || p.type == ParamType::kLogInt)
        return Status::Invalid(f + ": " + to_text(it->second) + " is not in " + std::to_string(p.low) + ".." +
                               std::to_string(p.high));
      return Status::Invalid(f + ": " + to_text(it->second) + " is not one of " + join(d));
    }
  }
  return Status::Ok();
}

namespace {

// Log-scale ints: log-uniform over [low, high + 1), so each octave is equally likely.
int64_t sample_log_int(const ParamSpec& p, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(std::log(static_cast<double>(p.low)),
                                           std::log(static_cast<double>(p.high) + 1.0));
  const int64_t v = static_cast<int64_t>(std::floor(std::exp(u(rng))));
  return std::clamp(v, p.low, p.high);
}

}  // namespace

Config Space::sample(std::mt19937_64& rng) const {
  Config out;
  for (const ParamSpec& p : params_) {
    if (!active(p, out)) continue;
    if (p.type == ParamType::kLogInt) {
      out[p.name] = sample_log_int(p, rng);
      continue;
    }
    if (p.type == ParamType::kInt) {
      out[p.name] = std::uniform_int_distribution<int64_t>(p.low, p.high)(rng);
      continue;
    }
    const std::vector<Value> d = p.domain();
    out[p.name] = d[std::uniform_int_distribution<size_t>(0, d.size() - 1)(rng)];
  }
  return out;
}

namespace {

// Walks every distinct canonical config in lexicographic order of the domains; `visit` returns false to stop.
void walk(const Space& space, size_t i, Config& c, const std::function<bool(const Config&)>& visit, bool& go_on) {
  const auto& params = space.params();
  if (!go_on) return;
  if (i == params.size()) {
    go_on = visit(c);
    return;
  }
  const ParamSpec& p = params[i];
  if (!space.active(p, c)) {
    walk(space, i + 1, c, visit, go_on);
    return;
  }
  for (const Value& v : p.domain()) {
    c[p.name] = v;
    walk(space, i + 1, c, visit, go_on);
    if (!go_on) break;
  }
  c.erase(p.name);
}

}  // namespace

std::vector<Config> Space::enumerate(size_t limit) const {
  std::vector<Config> out;
  if (limit == 0) return out;
  Config c;
  bool go_on = true;
  walk(*this, 0, c, [&](const Config& x) {
    out.push_back(x);
    return out.size() < limit;
  }, go_on);
  return out;
}

double Space::cardinality() const {
  // Product of the domain sizes: an upper bound (a config is fixed by its earliest differing parameter, which
  // is active in both, so distinct configs map to distinct full assignments). Exact by counting when small.
  double bound = 1;
  for (const ParamSpec& p : params_)
    bound *= static_cast<double>(p.type == ParamType::kChoice ? p.choices.size()
                                 : p.type == ParamType::kBool ? 2
                                                              : range_size(p));
  bool conditional = std::any_of(params_.begin(), params_.end(), [](const ParamSpec& p) { return !p.when.empty(); });
  if (!conditional || bound > kExactCountLimit) return bound;
  double n = 0;
  Config c;
  bool go_on = true;
  walk(*this, 0, c, [&](const Config&) {
    n += 1;
    return true;
  }, go_on);
  return n;
}

}  // namespace soartune::search
