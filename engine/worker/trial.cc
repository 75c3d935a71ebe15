#include "engine/worker/trial.h"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

namespace soartune::engine::worker {

namespace {

Status int_field(const YAML::Node& n, const std::string& field, int lo, int* out) {
  int v = 0;
  if (!n.IsScalar() || !YAML::convert<int>::decode(n, v) || v < lo)
    return Status::Invalid(field + ": " + (n.IsScalar() ? n.Scalar() : std::string("not a scalar")) + " is not an integer >= " + std::to_string(lo));
  *out = v;
  return Status::Ok();
}

// Whether `path` names an existing file; a path the file system refuses (too long, ...) names none.
bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

Result<TrialSpec> load_trial(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    return Status::Invalid("trial: " + path + " cannot be read as YAML: " + e.what());
  }
  if (!root.IsMap()) return Status::Invalid("trial: " + path + " is not a YAML mapping");
  static const char* kKeys[] = {"model", "backend", "seed", "launch", "layer_overrides", "workload", "tiers", "accuracy", "calibration", "reference", "name",
                                "fidelity"};   // fidelity: soartuned's record of the workload fraction this file runs
  for (const auto& kv : root) {
    // Unknown top-level keys are tolerated (a newer exporter may add some); knobs inside launch are not.
    if (!kv.first.IsScalar()) return Status::Invalid("trial: " + path + ": a top-level key is not a string");
    const std::string& k = kv.first.Scalar();
    if (std::find(std::begin(kKeys), std::end(kKeys), k) == std::end(kKeys)) spdlog::warn("trial: ignoring unknown key {}", k);
  }
  TrialSpec t;
  if (!root["model"] || !root["model"].IsScalar()) return Status::Invalid("model: missing; allowed: hf:<dir>, synthetic:<preset>");
  t.model = root["model"].Scalar();
  if (root["backend"]) {
    t.backend = root["backend"].IsScalar() ? root["backend"].Scalar() : "";
    if (t.backend != "auto" && t.backend != "cpu" && t.backend != "cuda")
      return Status::Invalid("backend: " + t.backend + " is not one of auto, cpu, cuda");
  }
  if (root["seed"]) {
    int s = 0;
    if (Status st = int_field(root["seed"], "seed", 0, &s); !st.ok()) return st;
    t.seed = static_cast<uint64_t>(s);
  }
  auto launch = LaunchConfig::parse(root["launch"], root["layer_overrides"]);
  if (!launch.ok()) return launch.status();
  t.launch = launch.value();
  const YAML::Node wl = root["workload"];
  if (!wl) return Status::Invalid("workload: missing; a mapping {name, requests} or a workload file path");
  if (wl.IsScalar()) {
    auto w = load_workload_file(wl.Scalar());
    if (!w.ok()) return w.status();
    t.workload = w.value();
  } else {
    auto w = parse_workload(wl);
    if (!w.ok()) return w.status();
    t.workload = w.value();
  }
  if (root["tiers"]) {
    const YAML::Node tiers = root["tiers"];
    if (!tiers.IsSequence() || tiers.size() == 0) return Status::Invalid("tiers: must be a non-empty list of concurrencies (0 = unlimited)");
    t.tiers.clear();
    for (std::size_t i = 0; i < tiers.size(); ++i) {
      int c = 0;
      if (Status s = int_field(tiers[i], "tiers[" + std::to_string(i) + "]", 0, &c); !s.ok()) return s;
      t.tiers.push_back(c);
    }
  }
  if (const YAML::Node a = root["accuracy"]) {
    if (!a.IsMap()) return Status::Invalid("accuracy: must be a mapping {set, samples, prompt_len, continuation_len}");
    if (a["set"]) {
      t.accuracy.set = a["set"].IsScalar() ? a["set"].Scalar() : "";
      if (t.accuracy.set != "synthetic" && !exists(t.accuracy.set))
        return Status::Invalid("accuracy.set: " + t.accuracy.set + " is not one of synthetic, or an existing .jsonl file");
    }
    if (a["model"]) {
      t.accuracy.model = a["model"].IsScalar() ? a["model"].Scalar() : "";
      std::error_code ec;
      if (t.accuracy.model.rfind("hf:", 0) != 0 || !std::filesystem::is_directory(t.accuracy.model.substr(3), ec))
        return Status::Invalid("accuracy.model: '" + t.accuracy.model + "' is not hf:<an existing model directory>");
    }
    if (a["samples"]) if (Status s = int_field(a["samples"], "accuracy.samples", 1, &t.accuracy.samples); !s.ok()) return s;
    if (a["prompt_len"]) if (Status s = int_field(a["prompt_len"], "accuracy.prompt_len", 1, &t.accuracy.prompt_len); !s.ok()) return s;
    if (a["continuation_len"]) if (Status s = int_field(a["continuation_len"], "accuracy.continuation_len", 1, &t.accuracy.continuation_len); !s.ok()) return s;
  }
  if (const YAML::Node c = root["calibration"]) {
    if (!c.IsMap()) return Status::Invalid("calibration: must be a mapping {set, samples, damp_pct, cache_dir}");
    if (c["set"]) {
      t.calibration.set = c["set"].IsScalar() ? c["set"].Scalar() : "";
      if (!exists(t.calibration.set))
        return Status::Invalid("calibration.set: " + t.calibration.set + " is not an existing .jsonl file");
    }
    if (c["samples"]) if (Status s = int_field(c["samples"], "calibration.samples", 1, &t.calibration.samples); !s.ok()) return s;
    if (c["damp_pct"]) {
      double d = 0;
      if (!c["damp_pct"].IsScalar() || !YAML::convert<double>::decode(c["damp_pct"], d) || !(d > 0 && d <= 100))
        return Status::Invalid("calibration.damp_pct: must be a number in (0, 100]");
      t.calibration.damp_pct = d;
    }
    if (c["cache_dir"]) t.calibration.cache_dir = c["cache_dir"].IsScalar() ? c["cache_dir"].Scalar() : "";
  }
  if (const YAML::Node r = root["reference"]) {
    if (!r.IsMap() && !r.IsNull()) return Status::Invalid("reference: must be a mapping {write, read}");
    if (r.IsMap()) {
      for (const char* k : {"write", "read"})
        if (r[k] && !r[k].IsScalar()) return Status::Invalid(std::string("reference.") + k + ": must be a path");
      if (r["write"]) t.reference_write = r["write"].Scalar();
      if (r["read"]) {
        t.reference_read = r["read"].Scalar();
        if (!exists(t.reference_read)) return Status::Invalid("reference.read: " + t.reference_read + " does not exist");
      }
    }
  }
  return t;
}

}  // namespace soartune::engine::worker
