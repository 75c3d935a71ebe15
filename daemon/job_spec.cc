#include "daemon/job_spec.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/knob_catalogue.h"
#include "core/launch_config.h"
#include "core/synthetic_presets.h"
#include "daemon/data_roots.h"
#include "daemon/early_stop_spec.h"
#include "daemon/fidelity.h"
#include "daemon/model_facts.h"
#include "daemon/request_limits.h"
#include "search/strategy.h"

namespace soartune::daemon {

namespace fs = std::filesystem;
using soartune::Config;
using soartune::Result;
using soartune::Status;
using soartune::Value;

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Status check_keys(const YAML::Node& node, const std::string& field, const std::vector<std::string>& allowed) {
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    bool known = false;
    for (const auto& a : allowed) known = known || a == key;
    if (!known) {
      std::string f = field.empty() ? key : field + "." + key;
      return Status::Invalid(f + ": unknown field; allowed: " + join(allowed));
    }
  }
  return Status::Ok();
}

Result<int64_t> read_int(const YAML::Node& n, const std::string& field, int64_t lo, int64_t hi) {
  std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  if (!n.IsScalar()) return Status::Invalid(field + ": must be an integer in " + range);
  Value v = soartune::value_from_text(n.Scalar());
  const int64_t* i = std::get_if<int64_t>(&v);
  if (!i) return Status::Invalid(field + ": '" + n.Scalar() + "' is not an integer; allowed: " + range);
  if (*i < lo || *i > hi) return Status::Invalid(field + ": " + n.Scalar() + " is out of range; allowed: " + range);
  return *i;
}

Result<double> read_positive(const YAML::Node& n, const std::string& field) {
  if (!n.IsScalar()) return Status::Invalid(field + ": must be a positive number");
  try {
    size_t used = 0;
    double d = std::stod(n.Scalar(), &used);
    if (used != n.Scalar().size() || !std::isfinite(d) || d <= 0) throw std::invalid_argument("");
    return d;
  } catch (const std::exception&) {
    return Status::Invalid(field + ": '" + n.Scalar() + "' is not a positive number");
  }
}

// A positive number no larger than `hi` (its unit in `unit`), so that no timeout or budget overflows a clock.
Result<double> read_positive_at_most(const YAML::Node& n, const std::string& field, double hi, const std::string& unit) {
  Result<double> d = read_positive(n, field);
  if (!d.ok()) return d;
  if (d.value() > hi)
    return Status::Invalid(field + ": " + n.Scalar() + " is out of range; allowed: > 0 and at most " +
                           std::to_string(static_cast<int64_t>(hi)) + " " + unit);
  return d;
}

Result<bool> read_bool(const YAML::Node& n, const std::string& field) {
  if (n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "false")) return n.Scalar() == "true";
  return Status::Invalid(field + ": must be true or false");
}

Result<std::string> read_string(const YAML::Node& n, const std::string& field) {
  if (!n.IsScalar() || n.Scalar().empty()) return Status::Invalid(field + ": must be a non-empty string");
  return n.Scalar();
}

Result<std::string> read_choice(const YAML::Node& n, const std::string& field,
                                const std::vector<std::string>& allowed) {
  if (!n.IsScalar()) return Status::Invalid(field + ": must be one of " + join(allowed));
  for (const auto& a : allowed)
    if (n.Scalar() == a) return a;
  return Status::Invalid(field + ": '" + n.Scalar() + "' is not one of " + join(allowed));
}

// [A-Za-z0-9][A-Za-z0-9._-]*, checked by hand: std::regex matches recursively, one stack frame per character,
// so a name of 100 000 characters in a spec (specs may be 256 KiB) overflowed the stack and killed the daemon.
bool is_plain_name(const std::string& s) {
  auto alnum = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (s.empty() || !alnum(s[0])) return false;
  for (char c : s)
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

Result<std::string> resolve_model(const YAML::Node& n, const SpecContext& ctx) {
  const std::string field = "model";
  if (!n.IsDefined() || n.IsNull()) return Status::Invalid("model: missing; give hf:<dir> or synthetic:<preset>");
  if (!n.IsScalar()) return Status::Invalid("model: must be a string: hf:<dir> or synthetic:<preset>");
  const std::string m = n.Scalar();
  if (m.rfind("synthetic:", 0) == 0) {
    std::string preset = m.substr(10);
    if (!is_plain_name(preset))
      return Status::Invalid("model: '" + m + "' has no valid preset name after synthetic: (e.g. synthetic:tiny)");
    if (Result<core::SyntheticPreset> p = core::find_synthetic_preset(preset); !p.ok()) return p.status();
    return m;
  }
  if (m.rfind("hf:", 0) == 0) {
    std::string dir = m.substr(3);
    if (dir.empty()) return Status::Invalid("model: hf: needs a directory (hf:<dir>)");
    Result<std::string> confined = confine_to_data_roots(dir, ctx.data_roots, "model");
    if (!confined.ok()) return confined.status();
    std::error_code ec;
    fs::path p = confined.value();
    if (!fs::is_directory(p, ec)) return Status::Invalid("model: " + dir + " is not a directory");
    if (!fs::exists(p / "config.json")) return Status::Invalid("model: " + dir + " has no config.json");
    return "hf:" + fs::weakly_canonical(p).string();
  }
  return Status::Invalid("model: '" + m + "' is not hf:<dir> or synthetic:<preset>");
}

// A launch-knob mapping (`reference:` / `fixed:`): knob -> scalar value, each checked against the catalogue.
Result<Config> read_knobs(const YAML::Node& n, const std::string& field) {
  return core::launch_config_from_yaml(n, field);
}

// A request's input_len, output_len or count, read as the worker reads it (yaml-cpp's integer conversion, which
// takes 010 as octal 8 and refuses 08), so that the daemon accepts exactly the numbers the worker will run.
// Read otherwise, 08 passed here and then threw in the context check below (found by tests/fuzz/job_spec_fuzz).
Result<int64_t> read_request_int(const YAML::Node& n, const std::string& field) {
  constexpr int64_t kMax = 1 << 20;
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v))
    return Status::Invalid(field + ": '" + (n.IsScalar() ? n.Scalar() : std::string("not a scalar")) +
                           "' is not an integer; allowed: 1.." + std::to_string(kMax));
  if (v < 1 || v > kMax) return Status::Invalid(field + ": " + n.Scalar() + " is out of range; allowed: 1.." + std::to_string(kMax));
  return v;
}

Status check_requests(const YAML::Node& requests, const std::string& field) {
  if (!requests.IsDefined() || !requests.IsSequence() || requests.size() == 0)
    return Status::Invalid(field + ": must be a non-empty list of {input_len, output_len, count}");
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    const YAML::Node r = requests[i];
    if (!r.IsMap()) return Status::Invalid(f + ": must be a mapping {name, input_len, output_len, count}");
    if (Status s = check_keys(r, f, {"name", "input_len", "output_len", "count"}); !s.ok()) return s;
    for (const char* k : {"input_len", "output_len", "count"}) {
      if (!r[k].IsDefined()) return Status::Invalid(f + "." + k + ": missing");
      Result<int64_t> v = read_request_int(r[k], f + "." + k);
      if (!v.ok()) return v.status();
    }
  }
  return Status::Ok();
}

Result<YAML::Node> resolve_workload(const YAML::Node& n, const SpecContext& ctx, std::string* name) {
  if (!n.IsDefined() || n.IsNull())
    return Status::Invalid("workload: missing; give a name from the workloads directory or a mapping with requests");
  if (n.IsScalar()) {
    const std::string wname = n.Scalar();
    if (!is_plain_name(wname)) return Status::Invalid("workload: '" + wname + "' is not a valid workload name");
    fs::path file = fs::path(ctx.workloads_dir) / (wname + ".yaml");
    if (Result<std::string> c = confine_to_data_roots(file.string(), ctx.data_roots, "workload"); !c.ok())
      return c.status();
    if (!fs::exists(file)) {
      std::vector<std::string> known;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(ctx.workloads_dir, ec))
        if (e.path().extension() == ".yaml") known.push_back(e.path().stem().string());
      std::sort(known.begin(), known.end());
      return Status::Invalid("workload: '" + wname + "' is not a workload in " + ctx.workloads_dir +
                             "; known: " + (known.empty() ? "(none)" : join(known)));
    }
    YAML::Node root;
    try {
      root = YAML::LoadFile(file.string());
    } catch (const YAML::Exception& e) {
      return Status::Invalid("workload: " + file.string() + ": " + e.what());
    }
    YAML::Node w = root["workload"].IsMap() ? root["workload"] : root;
    if (!w.IsMap()) return Status::Invalid("workload: " + file.string() + " is not a mapping with requests");
    YAML::Node out = YAML::Clone(w);
    if (!out["name"].IsDefined()) out["name"] = wname;
    if (Status s = check_requests(out["requests"], "workload(" + wname + ").requests"); !s.ok()) return s;
    *name = wname;
    return out;
  }
  if (!n.IsMap()) return Status::Invalid("workload: must be a workload name or a mapping {name, requests}");
  if (Status s = check_keys(n, "workload", {"name", "requests"}); !s.ok()) return s;
  if (Status s = check_requests(n["requests"], "workload.requests"); !s.ok()) return s;
  YAML::Node out = YAML::Clone(n);
  if (!out["name"].IsDefined()) out["name"] = "inline";
  *name = out["name"].Scalar();
  return out;
}

Result<YAML::Node> resolve_accuracy(const YAML::Node& n, const SpecContext& ctx) {
  YAML::Node out(YAML::NodeType::Map);
  out["set"] = "synthetic";
  out["samples"] = 16;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap()) return Status::Invalid("accuracy: must be a mapping {set, samples, prompt_len, continuation_len}");
  if (Status s = check_keys(n, "accuracy", {"set", "samples", "prompt_len", "continuation_len", "model"}); !s.ok())
    return s;
  if (n["model"].IsDefined()) {
    // A proxy: a trained model of the same family whose accuracy stands in for a model with synthetic weights.
    Result<std::string> m = read_string(n["model"], "accuracy.model");
    if (!m.ok()) return m.status();
    if (m.value().rfind("hf:", 0) != 0)
      return Status::Invalid("accuracy.model: '" + m.value() + "' is not hf:<dir> of a model with a config.json");
    Result<std::string> dir = confine_to_data_roots(m.value().substr(3), ctx.data_roots, "accuracy.model");
    if (!dir.ok()) return dir.status();
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(dir.value()) / "config.json", ec))
      return Status::Invalid("accuracy.model: '" + m.value() + "' is not hf:<dir> of a model with a config.json");
    out["model"] = "hf:" + dir.value();
  }
  if (n["set"].IsDefined()) {
    Result<std::string> set = read_string(n["set"], "accuracy.set");
    if (!set.ok()) return set.status();
    if (set.value() == "synthetic") {
      out["set"] = "synthetic";
    } else {
      fs::path p = set.value();
      if (p.extension() != ".jsonl")
        return Status::Invalid("accuracy.set: '" + set.value() + "' is not synthetic or a path to a .jsonl file");
      Result<std::string> confined = confine_to_data_roots(set.value(), ctx.data_roots, "accuracy.set");
      if (!confined.ok()) return confined.status();
      std::error_code ec;
      if (!fs::is_regular_file(confined.value(), ec))
        return Status::Invalid("accuracy.set: file " + set.value() + " not found");
      out["set"] = confined.value();
    }
  }
  for (const char* k : {"samples", "prompt_len", "continuation_len"}) {
    if (!n[k].IsDefined()) continue;
    Result<int64_t> v = read_int(n[k], std::string("accuracy.") + k, 1, 1 << 20);
    if (!v.ok()) return v.status();
    out[k] = v.value();
  }
  if (out["set"].Scalar() != "synthetic" && (n["prompt_len"].IsDefined() || n["continuation_len"].IsDefined()))
    return Status::Invalid("accuracy.prompt_len: only for the synthetic set");
  return out;
}

// The keys and bits as the worker will read them (the one parser in core/launch_config); layer indices are
// checked against the model where its layer count is known.
Status check_layer_overrides(const YAML::Node& n) {
  Result<LaunchConfig> c = LaunchConfig::parse(YAML::Node(), n);
  return c.ok() ? Status::Ok() : c.status();
}

void emit_value(YAML::Emitter& e, const Value& v) {
  if (const bool* b = std::get_if<bool>(&v)) e << (*b ? "true" : "false");
  else if (const int64_t* i = std::get_if<int64_t>(&v)) e << *i;
  else e << std::get<std::string>(v);
}

void emit_node(YAML::Emitter& e, const YAML::Node& n) { e << n; }

}  // namespace

namespace {

// With a serving target, knob values the serving engine cannot take (the catalogue's cannot_export rule, e.g.
// weight_group_size 256 under Marlin) are refused here, so the search never proposes a config that cannot be
// exported. (Refusing rather than silently dropping keeps the space the user wrote the space that is searched.)
Status check_exportable(const JobSpec& spec) {
  for (const search::ParamSpec& p : spec.space.params()) {
    const core::KnobSpec* k = core::find_knob(p.name);
    if (!k) continue;
    const std::vector<Value> domain = p.domain();
    for (size_t i = 0; i < domain.size(); ++i)
      if (std::string why = core::serving_export_refusal(*k, domain[i]); !why.empty())
        return Status::Invalid("space." + p.name + ": " + to_text(domain[i]) + " cannot be exported to " +
                               search::to_string(spec.serving->engine) + ": " + why);
  }
  for (const auto& [name, v] : spec.reference) {
    const core::KnobSpec* k = core::find_knob(name);
    if (!k || v == k->default_value) continue;
    if (std::string why = core::serving_export_refusal(*k, v); !why.empty())
      return Status::Invalid((spec.fixed.count(name) ? "fixed." : "reference.") + name + ": " + to_text(v) +
                             " cannot be exported to " + search::to_string(spec.serving->engine) + ": " + why);
  }
  return Status::Ok();
}

}  // namespace

Result<JobSpec> parse_job_spec(const std::string& yaml_text, const SpecContext& ctx) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    return Status::Invalid("spec_yaml: YAML syntax error at line " + std::to_string(e.mark.line + 1) + ", column " +
                           std::to_string(e.mark.column + 1) + ": " + e.msg);
  } catch (const YAML::Exception& e) {
    return Status::Invalid(std::string("spec_yaml: ") + e.what());
  }
  if (!root.IsMap()) return Status::Invalid("spec_yaml: the job spec must be a YAML mapping (model, space, ...)");
  if (Status s = check_keys(root, "", {"name", "model", "backend", "strategy", "seed", "budget", "parallel_trials",
                                       "trial_timeout_s", "workload", "accuracy", "scoring", "reference", "fixed",
                                       "space", "warm_start", "layer_overrides", "submissions", "serving",
                                       "multi_fidelity", "quantization", "early_stop"});
      !s.ok())
    return s;

  JobSpec spec;
  if (root["name"].IsDefined() && !root["name"].IsNull()) {
    if (!root["name"].IsScalar()) return Status::Invalid("name: must be a string");
    spec.name = root["name"].Scalar();
    if (Status s = check_text(spec.name, "name", kMaxNameBytes); !s.ok()) return s;
  }
  Result<std::string> model = resolve_model(root["model"], ctx);
  if (!model.ok()) return model.status();
  spec.model = model.value();

  if (root["backend"].IsDefined()) {
    Result<std::string> b = read_choice(root["backend"], "backend", {"auto", "cpu", "cuda"});
    if (!b.ok()) return b.status();
    spec.backend = b.value();
  }
  if (root["strategy"].IsDefined()) {
    if (!root["strategy"].IsScalar()) return Status::Invalid("strategy: must be one of bayes, random");
    spec.strategy = root["strategy"].Scalar();
  }
  if (auto st = search::make_strategy(spec.strategy); !st.ok()) return st.status();
  if (root["seed"].IsDefined()) {
    Result<int64_t> s = read_int(root["seed"], "seed", 0, INT64_MAX);
    if (!s.ok()) return s.status();
    spec.seed = static_cast<uint64_t>(s.value());
  }

  if (const YAML::Node b = root["budget"]; b.IsDefined() && !b.IsNull()) {
    if (!b.IsMap()) return Status::Invalid("budget: must be a mapping {trials, time_s, stop_when}");
    if (Status s = check_keys(b, "budget", {"trials", "time_s", "stop_when"}); !s.ok()) return s;
    if (b["trials"].IsDefined()) {
      Result<int64_t> t = read_int(b["trials"], "budget.trials", 1, 100000);
      if (!t.ok()) return t.status();
      spec.trial_budget = static_cast<int>(t.value());
    }
    if (b["time_s"].IsDefined()) {
      Result<double> t = read_positive_at_most(b["time_s"], "budget.time_s", kMaxTimeBudgetS, "s (30 days)");
      if (!t.ok()) return t.status();
      spec.time_budget_s = t.value();
    }
    if (const YAML::Node sw = b["stop_when"]; sw.IsDefined()) {
      if (!sw.IsMap()) return Status::Invalid("budget.stop_when: must be a mapping {ei_below_pct, rounds}");
      if (Status s = check_keys(sw, "budget.stop_when", {"ei_below_pct", "rounds"}); !s.ok()) return s;
      if (!sw["ei_below_pct"].IsDefined()) return Status::Invalid("budget.stop_when.ei_below_pct: missing");
      Result<double> x = read_positive_at_most(sw["ei_below_pct"], "budget.stop_when.ei_below_pct", 1000, "%");
      if (!x.ok()) return x.status();
      StopRule rule{x.value(), 3};
      if (sw["rounds"].IsDefined()) {
        Result<int64_t> k = read_int(sw["rounds"], "budget.stop_when.rounds", 1, 1000);
        if (!k.ok()) return k.status();
        rule.rounds = static_cast<int>(k.value());
      }
      spec.stop_when = rule;
    }
  }
  if (root["parallel_trials"].IsDefined()) {
    Result<int64_t> p = read_int(root["parallel_trials"], "parallel_trials", 1, 1024);
    if (!p.ok()) return p.status();
    spec.parallel_trials = static_cast<int>(p.value());
  }
  if (root["trial_timeout_s"].IsDefined()) {
    Result<double> t = read_positive_at_most(root["trial_timeout_s"], "trial_timeout_s", kMaxTrialTimeoutS, "s (7 days)");
    if (!t.ok()) return t.status();
    spec.trial_timeout_s = t.value();
  }

  Result<YAML::Node> workload = resolve_workload(root["workload"], ctx, &spec.workload_name);
  if (!workload.ok()) return workload.status();
  spec.workload = workload.value();
  Result<YAML::Node> accuracy = resolve_accuracy(root["accuracy"], ctx);
  if (!accuracy.ok()) return accuracy.status();
  spec.accuracy = accuracy.value();
  spec.accuracy_proxy = spec.accuracy["model"].IsDefined();
  if (Status s = parse_multi_fidelity(root["multi_fidelity"], &spec); !s.ok()) return s;
  Result<std::optional<search::EarlyStopRule>> early_stop = parse_early_stop(root["early_stop"]);
  if (!early_stop.ok()) return early_stop.status();
  spec.early_stop = early_stop.value();
  Result<QuantizationSpec> quantization = parse_quantization(root["quantization"], ctx.data_roots);
  if (!quantization.ok()) return quantization.status();
  spec.quantization = quantization.value();

  if (root["scoring"].IsDefined() && !root["scoring"].IsNull()) {
    Result<search::ScoringSpec> sc = search::ScoringSpec::parse(root["scoring"], "scoring");
    if (!sc.ok()) return sc.status();
    spec.scoring = sc.value();
  }

  if (!root["space"].IsDefined() || root["space"].IsNull())
    return Status::Invalid("space: missing; a mapping of knob -> parameter, e.g. weight_bits: {type: choice, values: [16, 8, 4]}");
  Result<search::Space> space = search::Space::parse(root["space"], "space");
  if (!space.ok()) return space.status();
  spec.space = space.value();
  if (spec.space.params().empty()) return Status::Invalid("space: empty; name at least one knob to vary");

  Result<Config> ref_overrides = read_knobs(root["reference"], "reference");
  if (!ref_overrides.ok()) return ref_overrides.status();
  Result<Config> fixed = read_knobs(root["fixed"], "fixed");
  if (!fixed.ok()) return fixed.status();
  for (const auto& [k, v] : fixed.value()) {
    if (spec.space.find(k)) return Status::Invalid("fixed." + k + ": also in space; a knob is either fixed or searched");
  }
  spec.fixed = fixed.value();
  Result<Config> reference = core::reference_config(ref_overrides.value(), "reference");
  if (!reference.ok()) return reference.status();
  spec.reference = reference.value();
  for (const auto& [k, v] : spec.fixed) spec.reference[k] = v;

  if (const YAML::Node sv = root["serving"]; sv.IsDefined() && !sv.IsNull()) {
    Result<search::ServingSpec> serving = search::parse_serving(sv, "serving");
    if (!serving.ok()) return serving.status();
    spec.serving = serving.value();
    if (Status s = check_exportable(spec); !s.ok()) return s;
  }

  if (root["warm_start"].IsDefined()) {
    Result<bool> w = read_bool(root["warm_start"], "warm_start");
    if (!w.ok()) return w.status();
    spec.warm_start = w.value();
  }
  if (const YAML::Node lo = root["layer_overrides"]; lo.IsDefined() && !lo.IsNull()) {
    if (Status s = check_layer_overrides(lo); !s.ok()) return s;
    spec.layer_overrides = YAML::Clone(lo);
  }
  // What can be known before any trial runs: the layers the overrides name exist, the workload fits.
  auto model_facts = [&]() -> Result<ModelFacts> {
    if (spec.model.rfind("hf:", 0) != 0) return synthetic_model_facts(spec.model.substr(std::string("synthetic:").size()));
    const std::string dir = spec.model.substr(3);
    if (Result<std::string> c = confine_to_data_roots(dir + "/config.json", ctx.data_roots, "model"); !c.ok())
      return c.status();
    return read_model_facts(dir);
  };
  Result<ModelFacts> facts = model_facts();
  if (!facts.ok()) return facts.status();
  if (spec.layer_overrides.IsDefined() && spec.layer_overrides.IsMap()) {
    Result<LaunchConfig> lc = LaunchConfig::parse(YAML::Node(), spec.layer_overrides);
    if (!lc.ok()) return lc.status();
    if (Status s = lc.value().check_layers(facts.value().layers); !s.ok()) return s;
  }
  if (const int64_t ctx_len = facts.value().max_position; ctx_len > 0) {
    const YAML::Node reqs = spec.workload["requests"];
    for (size_t i = 0; i < reqs.size(); ++i) {
      const std::string f = "workload.requests[" + std::to_string(i) + "]";
      Result<int64_t> in = read_request_int(reqs[i]["input_len"], f + ".input_len");
      if (!in.ok()) return in.status();
      Result<int64_t> out = read_request_int(reqs[i]["output_len"], f + ".output_len");
      if (!out.ok()) return out.status();
      const int64_t len = in.value() + out.value();
      if (len > ctx_len)
        return Status::Invalid("workload.requests[" + std::to_string(i) + "]: input_len + output_len = " +
                               std::to_string(len) + " exceeds the model's context of " + std::to_string(ctx_len) +
                               " tokens (" + facts.value().context_source + ")");
    }
  }
  if (const YAML::Node sub = root["submissions"]; sub.IsDefined() && !sub.IsNull()) {
    if (!sub.IsMap()) return Status::Invalid("submissions: must be a mapping {per_day, timezone}");
    if (Status s = check_keys(sub, "submissions", {"per_day", "timezone"}); !s.ok()) return s;
    int per_day = search::kDefaultSubmissionsPerDay;
    std::string tz = search::kDefaultBudgetTimeZone;
    if (sub["per_day"].IsDefined()) {
      Result<int64_t> n = read_int(sub["per_day"], "submissions.per_day", 1, 1000);
      if (!n.ok()) return n.status();
      per_day = static_cast<int>(n.value());
    }
    if (sub["timezone"].IsDefined()) {
      Result<std::string> t = read_string(sub["timezone"], "submissions.timezone");
      if (!t.ok()) return t.status();
      tz = t.value();
    }
    Result<search::SubmissionBudget> budget = search::SubmissionBudget::make(tz, per_day, "submissions");
    if (!budget.ok()) return budget.status();
    spec.submissions = budget.value();
  }
  if (spec.model.rfind("synthetic:", 0) == 0 && !spec.accuracy_proxy && !spec.scoring.gate.empty())
    spec.warnings.push_back(
        "accuracy: " + spec.model + " has random weights, so the accuracy gate is measured on random weights and "
        "says little about a trained model; set accuracy.model: hf:<dir> of a trained model of the same family to "
        "gate on proxy accuracy");
  return spec;
}

Config trial_config(const JobSpec& spec, const Config& suggestion) {
  Config c = spec.reference;
  Config view = spec.space.canonical(suggestion, spec.reference);
  for (const auto& [k, v] : view) c[k] = v;
  for (const auto& [k, v] : spec.fixed) c[k] = v;
  return c;
}

Config space_view(const JobSpec& spec, const Config& full) { return spec.space.canonical(full, spec.reference); }

std::string trial_yaml(const JobSpec& spec, const Config& launch, const ReferenceFile& ref,
                       const std::vector<std::string>& header) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "model" << YAML::Value << spec.model;
  e << YAML::Key << "backend" << YAML::Value << spec.backend;
  e << YAML::Key << "seed" << YAML::Value << spec.seed;
  e << YAML::Key << "launch" << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : launch) {
    e << YAML::Key << k << YAML::Value;
    emit_value(e, v);
  }
  e << YAML::EndMap;
  if (spec.layer_overrides.IsDefined() && spec.layer_overrides.IsMap()) {
    e << YAML::Key << "layer_overrides" << YAML::Value;
    emit_node(e, spec.layer_overrides);
  }
  e << YAML::Key << "workload" << YAML::Value;
  emit_node(e, spec.workload);
  e << YAML::Key << "tiers" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int c : search::kTierConcurrency) e << c;
  e << YAML::EndSeq;
  e << YAML::Key << "accuracy" << YAML::Value;
  emit_node(e, spec.accuracy);
  emit_calibration(e, spec.quantization, ref.quant_cache);
  if (!ref.write.empty() || !ref.read.empty()) {
    e << YAML::Key << "reference" << YAML::Value << YAML::BeginMap;
    if (!ref.write.empty()) e << YAML::Key << "write" << YAML::Value << ref.write;
    if (!ref.read.empty()) e << YAML::Key << "read" << YAML::Value << ref.read;
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  std::string out;
  for (const auto& h : header) out += "# " + h + "\n";
  out += e.c_str();
  out += "\n";
  return out;
}

std::string device_key(const JobSpec& spec, const std::string& device_class) {
  return spec.model + "|" + spec.backend + "|" + device_class + "|" + spec.workload_name;
}

}  // namespace soartune::daemon
