#include "daemon/fidelity.h"

#include <cmath>
#include <cstdio>

#include "search/multi_fidelity.h"

namespace soartune::daemon {

namespace {

bool read_int(const YAML::Node& n, int64_t* out) {
  if (!n.IsScalar()) return false;
  try {
    *out = n.as<int64_t>();
  } catch (const YAML::Exception&) {
    return false;
  }
  return true;
}

// The numbers a level changes: every request class's count and output_len, and the accuracy samples.
std::vector<int64_t> shape_at(const YAML::Node& workload, const YAML::Node& accuracy, double f) {
  std::vector<int64_t> v;
  const YAML::Node w = workload_at(workload, f);
  for (const YAML::Node& r : w["requests"]) {
    v.push_back(r["count"].as<int64_t>());
    v.push_back(r["output_len"].as<int64_t>());
  }
  v.push_back(accuracy_at(accuracy, f)["samples"].as<int64_t>(0));
  return v;
}

}  // namespace

int64_t shortened_count(int64_t n, double fidelity) {
  if (fidelity >= 1.0) return n;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(fidelity * static_cast<double>(n) - 1e-9)));
}

YAML::Node workload_at(const YAML::Node& workload, double fidelity) {
  YAML::Node w = YAML::Clone(workload);
  if (fidelity >= 1.0) return w;
  for (YAML::Node r : w["requests"]) {
    int64_t v = 0;
    if (read_int(r["count"], &v)) r["count"] = shortened_count(v, fidelity);
    if (read_int(r["output_len"], &v)) r["output_len"] = shortened_count(v, fidelity);
  }
  return w;
}

YAML::Node accuracy_at(const YAML::Node& accuracy, double fidelity) {
  YAML::Node a = YAML::Clone(accuracy);
  int64_t v = 0;
  if (fidelity < 1.0 && a.IsMap() && read_int(a["samples"], &v)) a["samples"] = shortened_count(v, fidelity);
  return a;
}

soartune::Status parse_multi_fidelity(const YAML::Node& n, JobSpec* spec) {
  if (!n.IsDefined() || n.IsNull()) return soartune::Status::Ok();
  if (!n.IsMap()) return soartune::Status::Invalid("multi_fidelity: must be a mapping {levels, eta} or {rungs, eta}");
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    if (k != "levels" && k != "eta" && k != "rungs")
      return soartune::Status::Invalid("multi_fidelity." + k + ": unknown key; allowed: levels, eta, rungs");
  }
  int64_t eta = 3;
  if (n["eta"].IsDefined() && !read_int(n["eta"], &eta))
    return soartune::Status::Invalid("multi_fidelity.eta: must be an integer in " + std::to_string(search::kMinEta) +
                                     ".." + std::to_string(search::kMaxEta));
  if (eta < search::kMinEta || eta > search::kMaxEta)
    return soartune::Status::Invalid("multi_fidelity.eta: must be an integer in " + std::to_string(search::kMinEta) +
                                     ".." + std::to_string(search::kMaxEta));
  std::vector<double> levels;
  if (n["levels"].IsDefined()) {
    if (n["rungs"].IsDefined()) return soartune::Status::Invalid("multi_fidelity.rungs: give levels or rungs, not both");
    if (!n["levels"].IsSequence())
      return soartune::Status::Invalid("multi_fidelity.levels: must be a list of workload fractions, ascending, ending with 1");
    for (size_t i = 0; i < n["levels"].size(); ++i) {
      double f = 0;
      try {
        f = n["levels"][i].as<double>();
      } catch (const YAML::Exception&) {
        return soartune::Status::Invalid("multi_fidelity.levels[" + std::to_string(i) + "]: must be a number in (0, 1]");
      }
      levels.push_back(f);
    }
  } else {
    int64_t rungs = 3;
    if (n["rungs"].IsDefined() && (!read_int(n["rungs"], &rungs) || rungs < 2 || rungs > search::kMaxFidelityLevels))
      return soartune::Status::Invalid("multi_fidelity.rungs: must be an integer in 2.." +
                                       std::to_string(search::kMaxFidelityLevels));
    for (int64_t k = rungs - 1; k >= 0; --k) levels.push_back(std::pow(static_cast<double>(eta), -static_cast<double>(k)));
  }
  if (soartune::Status s = search::check_fidelity_levels(levels, static_cast<int>(eta), "multi_fidelity"); !s.ok())
    return s;
  for (size_t i = 0; i + 1 < levels.size(); ++i) {
    if (shape_at(spec->workload, spec->accuracy, levels[i]) == shape_at(spec->workload, spec->accuracy, levels[i + 1])) {
      char buf[300];
      std::snprintf(buf, sizeof buf,
                    "multi_fidelity.levels[%zu]: %g runs the same workload and accuracy samples as level %g (counts, "
                    "output lengths and samples are too small to shorten further); drop it or raise it",
                    i, levels[i], levels[i + 1]);
      return soartune::Status::Invalid(buf);
    }
  }
  spec->fidelity_levels = std::move(levels);
  spec->fidelity_eta = static_cast<int>(eta);
  return soartune::Status::Ok();
}

std::string trial_yaml_at(const JobSpec& spec, const soartune::Config& launch, const ReferenceFile& ref,
                          double fidelity, const std::vector<std::string>& header) {
  if (search::is_full_fidelity(fidelity)) return trial_yaml(spec, launch, ref, header);
  JobSpec at = spec;
  // reset(), not =: a copied YAML::Node shares the spec's node, and = would write the shortened one into it.
  at.workload.reset(workload_at(spec.workload, fidelity));
  at.accuracy.reset(accuracy_at(spec.accuracy, fidelity));
  std::string out = trial_yaml(at, launch, ref, header);
  char line[64];
  std::snprintf(line, sizeof line, "fidelity: %.17g\n", fidelity);
  return out + line;
}

std::string reference_file_name(const JobSpec& spec, double fidelity) {
  const int k = search::fidelity_level_index(spec.fidelity_levels, fidelity);
  if (search::is_full_fidelity(fidelity) || k < 0) return "reference.json";
  return "reference-level" + std::to_string(k) + ".json";
}

std::optional<double> reference_level_missing(const JobSpec& spec, const ScoredTrials& trials) {
  for (double f : spec.fidelity_levels) {
    if (search::is_full_fidelity(f)) continue;
    bool have = false;
    for (const auto& [n, t] : trials.all()) {
      if (!t.is_reference || std::fabs(t.fidelity - f) > 1e-9) continue;
      if (t.status == TrialStatus::kComplete || t.status == TrialStatus::kRunning) have = true;
    }
    if (!have) return f;
  }
  return std::nullopt;
}

}  // namespace soartune::daemon
