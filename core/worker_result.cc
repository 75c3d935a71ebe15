#include "core/worker_result.h"

#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/json_fields.h"
#include "core/worker_progress.h"
#include "core/utf8.h"

namespace soartune {

using nlohmann::json;
using json_fields::Reader;

namespace {

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The start of `s` for an error message: one line, printable, at most 80 bytes, valid UTF-8.
std::string preview(std::string_view s) {
  std::string p = valid_utf8(utf8_prefix(trimmed(s), 80));
  for (char& c : p)
    if (static_cast<unsigned char>(c) < 32) c = ' ';
  return p;
}

Result<WorkerResult> read(const json& j) {
  Reader r;
  WorkerResult out;
  r.boolean(j, "ok", "ok", out.ok, true);
  r.string(j, "backend", "backend", out.backend, false);
  r.string(j, "device", "device", out.device, false);
  r.string(j, "engine_build", "engine_build", out.engine_build, false);
  r.integer(j, "peak_memory_bytes", "peak_memory_bytes", out.peak_memory_bytes);
  if (const json* t = r.find(j, "timings_s")) {
    if (!t->is_object()) r.wrong_type("timings_s", "an object", *t);
    else {
      r.number(*t, "load", "timings_s.load", out.load_s, false);
      r.number(*t, "accuracy", "timings_s.accuracy", out.accuracy_s, false);
      r.number(*t, "tiers", "timings_s.tiers", out.tiers_s, false);
      r.number(*t, "weights", "timings_s.weights", out.weights_s, false);
      r.number(*t, "prepare", "timings_s.prepare", out.prepare_s, false);
    }
  }
  if (const json* p = r.find(j, "plans")) {
    if (!p->is_array()) r.wrong_type("plans", "an array", *p);
    else
      for (size_t i = 0; i < p->size(); ++i) {
        const json& e = (*p)[i];
        const std::string path = "plans[" + std::to_string(i) + "]";
        if (!e.is_object()) {
          r.wrong_type(path, "an object", e);
          break;
        }
        KernelPlan k;
        r.string(e, "op", path + ".op", k.op, true);
        r.string(e, "shape", path + ".shape", k.shape, false);
        r.string_map(e, "choice", path + ".choice", k.choice);
        out.plans.push_back(std::move(k));
      }
  }
  if (r.problem) return Status::Invalid(*r.problem);
  if (!out.ok) {
    if (const json* e = r.find(j, "error")) {
      if (e->is_string()) {
        out.error.message = Reader::capped(e->get<std::string>());
      } else if (!e->is_object()) {
        r.wrong_type("error", "an object", *e);
      } else {
        r.string(*e, "field", "error.field", out.error.field, false);
        r.string(*e, "message", "error.message", out.error.message, false);
        std::string kind;
        r.string(*e, "kind", "error.kind", kind, false);
        if (!kind.empty()) {
          std::optional<FailureKind> k = failure_kind_from_string(kind);
          if (!k || (*k != FailureKind::kInvalidConfig && *k != FailureKind::kOutOfMemory && *k != FailureKind::kWorkerError))
            r.fail("error.kind", "'" + kind + "' is not one of invalid_config, out_of_memory, worker_error");
          else
            out.error.kind = *k;
        }
      }
    }
    if (r.problem) return Status::Invalid(*r.problem);
    return out;
  }
  // A successful result needs its measurements.
  const json* tiers = r.find(j, "tiers");
  if (!tiers) r.fail("tiers", "missing");
  else if (!tiers->is_array()) r.wrong_type("tiers", "an array", *tiers);
  else
    for (size_t i = 0; i < tiers->size() && !r.problem; ++i) {
      const json& e = (*tiers)[i];
      const std::string path = "tiers[" + std::to_string(i) + "]";
      if (!e.is_object()) {
        r.wrong_type(path, "an object", e);
        break;
      }
      TierMeasurement m;
      r.tier(e, path, m);
      out.tiers.push_back(std::move(m));
    }
  const json* acc = r.find(j, "accuracy");
  if (!acc) r.fail("accuracy", "missing");
  else if (!acc->is_object()) r.wrong_type("accuracy", "an object", *acc);
  else r.accuracy(*acc, "accuracy", out.accuracy);
  if (const json* q = r.find(j, "quantization")) {
    if (!q->is_object()) r.wrong_type("quantization", "an object", *q);
    else {
      r.string(*q, "method", "quantization.method", out.quantization.method, true);
      r.integer(*q, "calibration_sequences", "quantization.calibration_sequences", out.quantization.calibration_sequences);
      r.integer(*q, "held_out_skipped", "quantization.held_out_skipped", out.quantization.held_out_skipped);
      r.boolean(*q, "cached", "quantization.cached", out.quantization.cached, false);
      r.number(*q, "seconds", "quantization.seconds", out.quantization.seconds, false);
      r.string(*q, "solver", "quantization.solver", out.quantization.solver, false);
      const std::string& solver = out.quantization.solver;
      if (!solver.empty() && solver != "cpu" && solver != "cuda")
        r.fail("quantization.solver", "'" + solver + "' is not one of cpu, cuda");
    }
  }
  if (r.problem) return Status::Invalid(*r.problem);
  return out;
}

}  // namespace

std::string to_json(const WorkerResult& r) {
  json j;
  j["ok"] = r.ok;
  if (!r.ok) {
    json e = {{"kind", to_string(r.error.kind)}, {"message", r.error.message}};
    if (!r.error.field.empty()) e["field"] = r.error.field;
    j["error"] = e;
  } else {
    json tiers = json::array();
    for (const TierMeasurement& t : r.tiers) tiers.push_back(json_fields::tier_json(t));
    j["tiers"] = tiers;
    j["accuracy"] = json_fields::accuracy_json(r.accuracy);
    if (!r.quantization.method.empty())
      j["quantization"] = {{"method", r.quantization.method},
                           {"calibration_sequences", r.quantization.calibration_sequences},
                           {"held_out_skipped", r.quantization.held_out_skipped},
                           {"cached", r.quantization.cached},
                           {"seconds", r.quantization.seconds}};
    if (!r.quantization.solver.empty()) j["quantization"]["solver"] = r.quantization.solver;
    j["peak_memory_bytes"] = r.peak_memory_bytes;
    j["timings_s"] = {{"load", r.load_s}, {"accuracy", r.accuracy_s}, {"tiers", r.tiers_s},
                      {"weights", r.weights_s}, {"prepare", r.prepare_s}};
  }
  if (!r.backend.empty()) j["backend"] = r.backend;
  if (!r.device.empty()) j["device"] = r.device;
  if (!r.engine_build.empty()) j["engine_build"] = r.engine_build;
  json plans = json::array();
  for (const KernelPlan& p : r.plans) plans.push_back({{"op", p.op}, {"shape", p.shape}, {"choice", p.choice}});
  j["plans"] = plans;
  // Replace, not throw, should a message carry bytes that are not UTF-8 (a path, a driver's text).
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<WorkerResult> parse_worker_output(std::string_view stdout_text) {
  const std::string_view t = trimmed(stdout_text);
  if (t.empty()) return Status::Invalid("garbage output: printed nothing on stdout");
  // The result is printed last: try the whole text, then each line that opens an object, from the last. Only
  // the last few such lines: each try parses to the end of the text, so trying every line would cost quadratic
  // time on a stdout of many lines that open objects (16 MB of them would hold the daemon for hours).
  // A progress line (worker_progress.h) is never the result: a worker that printed progress and then died
  // without a result has no result.
  auto is_result = [](const json& k) { return !k.is_discarded() && k.is_object() && !k.contains(kProgressKey); };
  json j = json::parse(t.begin(), t.end(), nullptr, false);
  if (!is_result(j)) {
    j = json();
    int tries = 0;
    for (size_t pos = t.rfind("\n{"); pos != std::string_view::npos && tries < kMaxResultLineTries;
         pos = pos == 0 ? std::string_view::npos : t.rfind("\n{", pos - 1), ++tries) {
      json k = json::parse(t.begin() + static_cast<std::ptrdiff_t>(pos + 1), t.end(), nullptr, false);
      if (is_result(k)) {
        j = std::move(k);
        break;
      }
    }
  }
  if (!is_result(j)) return Status::Invalid("garbage output: stdout is not a JSON object (starts with '" + preview(t) + "')");
  Result<WorkerResult> r = read(j);
  if (!r.ok()) return Status::Invalid("bad worker result: " + r.status().message);
  return r;
}

}  // namespace soartune
