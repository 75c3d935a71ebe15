#include "daemon/quantization_spec.h"

#include <cmath>
#include <filesystem>

#include "core/knob_value.h"
#include "daemon/data_roots.h"

namespace soartune::daemon {

namespace fs = std::filesystem;
using soartune::Result;
using soartune::Status;

Result<QuantizationSpec> parse_quantization(const YAML::Node& n, const std::vector<std::string>& data_roots,
                                            const std::string& field) {
  QuantizationSpec q;
  if (!n.IsDefined() || n.IsNull()) return q;
  if (!n.IsMap()) return Status::Invalid(field + ": must be a mapping {calibration_set, calibration_samples, damp_pct}");
  for (const auto& kv : n) {
    const std::string k = kv.first.Scalar();
    if (k != "calibration_set" && k != "calibration_samples" && k != "damp_pct")
      return Status::Invalid(field + "." + k + ": unknown field; allowed: calibration_set, calibration_samples, damp_pct");
  }
  if (const YAML::Node s = n["calibration_set"]; s.IsDefined()) {
    const std::string f = field + ".calibration_set";
    if (!s.IsScalar() || s.Scalar().empty())
      return Status::Invalid(f + ": must be accuracy or a path to a .jsonl file");
    if (s.Scalar() != "accuracy") {
      if (fs::path(s.Scalar()).extension() != ".jsonl")
        return Status::Invalid(f + ": '" + s.Scalar() + "' is not accuracy or a path to a .jsonl file");
      Result<std::string> confined = confine_to_data_roots(s.Scalar(), data_roots, f);
      if (!confined.ok()) return confined.status();
      std::error_code ec;
      if (!fs::is_regular_file(confined.value(), ec)) return Status::Invalid(f + ": file " + s.Scalar() + " not found");
      q.calibration_set = confined.value();
    }
  }
  if (const YAML::Node s = n["calibration_samples"]; s.IsDefined()) {
    const std::string f = field + ".calibration_samples";
    const std::string range = "1.." + std::to_string(kMaxCalibrationSamples);
    const Value v = s.IsScalar() ? soartune::value_from_text(s.Scalar()) : Value(std::string());
    const int64_t* i = std::get_if<int64_t>(&v);
    if (!i) return Status::Invalid(f + ": '" + (s.IsScalar() ? s.Scalar() : "") + "' is not an integer; allowed: " + range);
    if (*i < 1 || *i > kMaxCalibrationSamples) return Status::Invalid(f + ": " + s.Scalar() + " is out of range; allowed: " + range);
    q.calibration_samples = static_cast<int>(*i);
  }
  if (const YAML::Node s = n["damp_pct"]; s.IsDefined()) {
    const std::string f = field + ".damp_pct";
    double d = 0;
    bool ok = s.IsScalar();
    if (ok) {
      try {
        size_t used = 0;
        d = std::stod(s.Scalar(), &used);
        ok = used == s.Scalar().size() && std::isfinite(d);
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) return Status::Invalid(f + ": '" + (s.IsScalar() ? s.Scalar() : "") + "' is not a number; allowed: > 0 and at most 100");
    if (!(d > 0 && d <= 100)) return Status::Invalid(f + ": " + s.Scalar() + " is out of range; allowed: > 0 and at most 100");
    q.damp_pct = d;
  }
  return q;
}

void emit_calibration(YAML::Emitter& e, const QuantizationSpec& q, const std::string& cache_dir) {
  e << YAML::Key << "calibration" << YAML::Value << YAML::BeginMap;
  if (!q.calibration_set.empty()) e << YAML::Key << "set" << YAML::Value << q.calibration_set;
  e << YAML::Key << "samples" << YAML::Value << q.calibration_samples;
  e << YAML::Key << "damp_pct" << YAML::Value << q.damp_pct;
  if (!cache_dir.empty()) e << YAML::Key << "cache_dir" << YAML::Value << cache_dir;
  e << YAML::EndMap;
}

}  // namespace soartune::daemon
