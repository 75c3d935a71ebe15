#include "search/serving_engine.h"

#include <charconv>
#include <optional>
#include <cstdlib>
#include <set>

#include "core/knob_catalogue.h"
#include "search/serving_flag_lists.h"   // generated

namespace soartune::search {
namespace {

bool is_int(const std::string& s) {
  long long v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  return !s.empty() && ec == std::errc() && p == end;
}

bool is_float(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Status check_value(const ServerFlag& f, const std::string& v, const std::string& field) {
  if (!f.choices.empty()) {
    for (const std::string& c : f.choices)
      if (c == v) return Status::Ok();
    return Status::Invalid(field + ": " + f.name + " " + v + ": not one of " + join(f.choices));
  }
  if (f.type == "int" && !is_int(v)) return Status::Invalid(field + ": " + f.name + " " + v + ": not an integer");
  if (f.type == "float" && !is_float(v)) return Status::Invalid(field + ": " + f.name + " " + v + ": not a number");
  return Status::Ok();
}

// The flags a launch knob sets (the catalogue's serving rules): a base flag among them would duplicate or
// contradict a tuned one.
std::map<std::string, std::string> knob_flags() {
  std::map<std::string, std::string> out;
  for (const core::KnobSpec& k : core::launch_knobs())
    for (const std::string& f : k.serving.flags) out.emplace(f, k.name);
  return out;
}

}  // namespace

Result<ServingEngine> parse_serving_engine(const std::string& text, const std::string& field) {
  if (text == "sglang-upstream") return ServingEngine::kSglangUpstream;
  if (text == "sglang-minicpm") return ServingEngine::kSglangMinicpm;
  return Status::Invalid(field + ": " + (text.empty() ? std::string("(empty)") : text) +
                         " is not one of sglang-upstream, sglang-minicpm");
}

const char* to_string(ServingEngine e) {
  return e == ServingEngine::kSglangMinicpm ? "sglang-minicpm" : "sglang-upstream";
}

Result<FlagList> FlagList::parse(const std::string& yaml_text, const std::string& what) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::Invalid(what + ": " + e.what());
  }
  const YAML::Node flags = root["flags"];
  if (!flags.IsMap()) return Status::Invalid(what + ": flags: must be a mapping of flag -> {value, choices}");
  FlagList out;
  for (const auto& kv : flags) {
    const std::string name = kv.first.Scalar();
    const std::string f = what + ": flags." + name;
    if (name.rfind("--", 0) != 0) return Status::Invalid(f + ": a flag starts with --");
    const YAML::Node spec = kv.second;
    if (!spec.IsMap()) return Status::Invalid(f + ": must be a mapping {value, choices, nargs} or {alias_of}");
    if (spec["alias_of"]) {
      out.aliases_[name] = spec["alias_of"].Scalar();
      continue;
    }
    ServerFlag flag;
    flag.name = name;
    if (spec["value"]) {
      flag.takes_value = true;
      flag.type = spec["value"].Scalar();
      if (flag.type != "int" && flag.type != "float" && flag.type != "str")
        return Status::Invalid(f + ".value: " + flag.type + " is not one of int, float, str");
    }
    if (spec["choices"])
      for (const auto& c : spec["choices"]) flag.choices.push_back(c.Scalar());
    flag.many = spec["nargs"] && spec["nargs"].Scalar() == "many";
    out.flags_[name] = std::move(flag);
  }
  for (const auto& [alias, target] : out.aliases_)
    if (!out.flags_.count(target)) return Status::Invalid(what + ": flags." + alias + ": alias of unknown " + target);
  return out;
}

const ServerFlag* FlagList::find(const std::string& name) const {
  auto it = flags_.find(canonical(name));
  return it == flags_.end() ? nullptr : &it->second;
}

std::string FlagList::canonical(const std::string& name) const {
  auto it = aliases_.find(name);
  return it == aliases_.end() ? name : it->second;
}

const FlagList& flag_list(ServingEngine engine) {
  // The files are part of the build (serving_flag_lists.h is generated from configs/serving/); a file that
  // does not parse is a build defect, so failing loudly at first use is right.
  static const FlagList kUpstream = [] {
    Result<FlagList> r = FlagList::parse(kSglangUpstreamFlagsYaml, "configs/serving/sglang-upstream-flags.yaml");
    if (!r.ok()) std::abort();
    return r.value();
  }();
  static const FlagList kMinicpm = [] {
    Result<FlagList> r = FlagList::parse(kSglangMinicpmFlagsYaml, "configs/serving/sglang-minicpm-flags.yaml");
    if (!r.ok()) std::abort();
    return r.value();
  }();
  return engine == ServingEngine::kSglangMinicpm ? kMinicpm : kUpstream;
}

Result<std::vector<ParsedFlag>> parse_server_args(const FlagList& flags, const std::vector<std::string>& tokens,
                                                  const std::string& field, const std::string& engine_name) {
  std::vector<ParsedFlag> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    std::string tok = tokens[i];
    std::optional<std::string> inline_value;
    if (auto eq = tok.find('='); tok.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = tok.substr(eq + 1);
      tok = tok.substr(0, eq);
    }
    if (tok.rfind("--", 0) != 0) return Status::Invalid(f + ": " + tok + ": a value without a flag before it");
    const ServerFlag* spec = flags.find(tok);
    if (!spec) return Status::Invalid(f + ": " + tok + " is not a flag of " + engine_name);
    ParsedFlag p;
    p.flag = spec->name;
    if (!spec->takes_value) {
      if (inline_value) return Status::Invalid(f + ": " + tok + " takes no value");
    } else if (inline_value) {
      p.values.push_back(*inline_value);
    } else {
      while (i + 1 < tokens.size() && tokens[i + 1].rfind("--", 0) != 0) {
        p.values.push_back(tokens[++i]);
        if (!spec->many) break;
      }
      if (p.values.empty()) return Status::Invalid(f + ": " + tok + " needs a value");
    }
    for (const std::string& v : p.values)
      if (Status s = check_value(*spec, v, f); !s.ok()) return s;
    out.push_back(std::move(p));
  }
  return out;
}

const std::vector<std::string>* flag_values(const std::vector<ParsedFlag>& args, const std::string& flag) {
  for (const ParsedFlag& p : args)
    if (p.flag == flag) return &p.values;
  return nullptr;
}

std::vector<std::string> default_base_args(ServingEngine engine) {
  // The flags every launch line of the MiniCPM-SALA race carries, as issue 19 of this project quotes the race
  // (checked against the fork's server_args.py: each is a switch or takes the value shown).
  if (engine == ServingEngine::kSglangMinicpm)
    return {"--trust-remote-code", "--disable-radix-cache", "--attention-backend", "minicpm_flashinfer",
            "--dense-as-sparse", "--skip-server-warmup"};
  return {};
}

Status check_race_rules(ServingEngine engine, const std::vector<ParsedFlag>& args, const std::string& field) {
  if (engine == ServingEngine::kSglangMinicpm && !flag_values(args, "--disable-radix-cache"))
    return Status::Invalid(field + ": --disable-radix-cache is missing; the race forbids the radix (prefix) cache, "
                           "whose reuse across requests would skew its timings");
  return Status::Ok();
}

Result<ServingSpec> parse_serving(const YAML::Node& node, const std::string& field) {
  if (!node.IsMap()) return Status::Invalid(field + ": must be a mapping {engine, base_args}");
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    if (key != "engine" && key != "base_args")
      return Status::Invalid(field + "." + key + ": unknown field; allowed: engine, base_args");
  }
  ServingSpec spec;
  if (!node["engine"] || !node["engine"].IsScalar())
    return Status::Invalid(field + ".engine: missing; one of sglang-upstream, sglang-minicpm");
  Result<ServingEngine> e = parse_serving_engine(node["engine"].Scalar(), field + ".engine");
  if (!e.ok()) return e.status();
  spec.engine = e.value();
  if (const YAML::Node b = node["base_args"]; b.IsDefined() && !b.IsNull()) {
    if (!b.IsSequence()) return Status::Invalid(field + ".base_args: must be a list of flags and values");
    for (size_t i = 0; i < b.size(); ++i) {
      if (!b[i].IsScalar())
        return Status::Invalid(field + ".base_args[" + std::to_string(i) + "]: must be a string");
      const std::string& tok = b[i].Scalar();
      // SGLANG_SERVER_ARGS is split on whitespace by the launcher, with no quote removal: only plain words pass.
      bool plain = !tok.empty();
      for (char ch : tok)
        plain = plain && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                          ch == '_' || ch == '-' || ch == '.' || ch == '/' || ch == ':' || ch == '=' || ch == '+' ||
                          ch == ',');
      if (!plain)
        return Status::Invalid(field + ".base_args[" + std::to_string(i) + "]: '" + tok +
                               "' must be one word of letters, digits and - _ . / : = + , (SGLANG_SERVER_ARGS is "
                               "split on spaces, without quote removal)");
      spec.base_args.push_back(tok);
    }
  } else {
    spec.base_args = default_base_args(spec.engine);
  }
  const std::string args_field = field + ".base_args";
  Result<std::vector<ParsedFlag>> parsed =
      parse_server_args(flag_list(spec.engine), spec.base_args, args_field, to_string(spec.engine));
  if (!parsed.ok()) return parsed.status();
  std::set<std::string> seen;
  const std::map<std::string, std::string> tuned = knob_flags();
  for (const ParsedFlag& p : parsed.value()) {
    if (!seen.insert(p.flag).second) return Status::Invalid(args_field + ": " + p.flag + " is given twice");
    if (auto it = tuned.find(p.flag); it != tuned.end())
      return Status::Invalid(args_field + ": " + p.flag + " is set by the launch knob " + it->second +
                             "; vary it in space: or hold it in fixed:, not in base_args");
  }
  if (Status s = check_race_rules(spec.engine, parsed.value(), args_field); !s.ok()) return s;
  return spec;
}

}  // namespace soartune::search
