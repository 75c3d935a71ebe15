#include "core/worker_result.h"

#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/utf8.h"

namespace soartune {

using nlohmann::json;

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

const char* type_name(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "boolean";
  if (j.is_number()) return "number";
  if (j.is_string()) return "string";
  if (j.is_array()) return "array";
  return "object";
}

// Reads typed fields out of an untrusted JSON object; the first problem is kept with its field path.
class Reader {
 public:
  std::optional<std::string> problem;

  void fail(const std::string& field, const std::string& what) {
    if (!problem) problem = field + ": " + what;
  }
  void wrong_type(const std::string& field, const char* expected, const json& got) {
    fail(field, std::string("expected ") + expected + ", got " + type_name(got));
  }
  // nullptr when absent (or not an object to look in).
  const json* find(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  void boolean(const json& obj, const char* key, const std::string& path, bool& out, bool required) {
    const json* v = find(obj, key);
    if (!v) return required ? fail(path, "missing") : void();
    if (!v->is_boolean()) return wrong_type(path, "a boolean", *v);
    out = v->get<bool>();
  }
  void number(const json& obj, const char* key, const std::string& path, double& out, bool required) {
    const json* v = find(obj, key);
    if (!v) return required ? fail(path, "missing") : void();
    if (!v->is_number()) return wrong_type(path, "a number", *v);
    const double d = v->get<double>();
    if (!std::isfinite(d)) return fail(path, "not a finite number");
    out = d;
  }
  template <typename Int>
  void integer(const json& obj, const char* key, const std::string& path, Int& out) {
    const json* v = find(obj, key);
    if (!v) return;
    if (!v->is_number_integer()) return wrong_type(path, "an integer", *v);
    if (v->is_number_unsigned() ? v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) : false)
      return fail(path, "out of range");
    out = static_cast<Int>(v->get<int64_t>());
  }
  void string(const json& obj, const char* key, const std::string& path, std::string& out, bool required) {
    const json* v = find(obj, key);
    if (!v) return required ? fail(path, "missing") : void();
    if (!v->is_string()) return wrong_type(path, "a string", *v);
    out = capped(v->get_ref<const std::string&>());
  }
  static std::string capped(const std::string& s) {
    // The parser only accepts valid UTF-8; valid_utf8 keeps that true whatever the input was.
    if (s.size() <= kMaxResultString) return valid_utf8(s);
    return valid_utf8(utf8_prefix(s, kMaxResultString)) + " [cut at " + std::to_string(kMaxResultString) + " bytes]";
  }
  void string_map(const json& obj, const char* key, const std::string& path, std::map<std::string, std::string>& out) {
    const json* v = find(obj, key);
    if (!v) return;
    if (!v->is_object()) return wrong_type(path, "an object", *v);
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it.value().is_string()) return wrong_type(path + "." + it.key(), "a string", it.value());
      out[capped(it.key())] = capped(it.value().get_ref<const std::string&>());
    }
  }
  void percentiles(const json& obj, const char* key, const std::string& path, LatencyPercentiles& out) {
    const json* v = find(obj, key);
    if (!v) return;
    if (!v->is_object()) return wrong_type(path, "an object", *v);
    number(*v, "p50", path + ".p50", out.p50, false);
    number(*v, "p90", path + ".p90", out.p90, false);
    number(*v, "p99", path + ".p99", out.p99, false);
  }
};

json percentiles_json(const LatencyPercentiles& p) { return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}}; }

Result<WorkerResult> read(const json& j) {
  Reader r;
  WorkerResult out;
  r.boolean(j, "ok", "ok", out.ok, true);
  r.string(j, "backend", "backend", out.backend, false);
  r.string(j, "device", "device", out.device, false);
  r.string(j, "engine_build", "engine_build", out.engine_build, false);
  r.integer(j, "peak_memory_bytes", "peak_memory_bytes", out.peak_memory_bytes);
  r.string_map(j, "env", "env", out.env);
  if (const json* t = r.find(j, "timings_s")) {
    if (!t->is_object()) r.wrong_type("timings_s", "an object", *t);
    else {
      r.number(*t, "load", "timings_s.load", out.load_s, false);
      r.number(*t, "accuracy", "timings_s.accuracy", out.accuracy_s, false);
      r.number(*t, "tiers", "timings_s.tiers", out.tiers_s, false);
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
      r.string(e, "tier", path + ".tier", m.tier, true);
      r.integer(e, "concurrency", path + ".concurrency", m.concurrency);
      r.number(e, "duration_s", path + ".duration_s", m.duration_s, true);
      r.integer(e, "requests", path + ".requests", m.requests);
      r.integer(e, "output_tokens", path + ".output_tokens", m.output_tokens);
      r.percentiles(e, "ttft_ms", path + ".ttft_ms", m.ttft_ms);
      r.percentiles(e, "tpot_ms", path + ".tpot_ms", m.tpot_ms);
      r.number(e, "output_tokens_per_s", path + ".output_tokens_per_s", m.output_tokens_per_s, false);
      out.tiers.push_back(std::move(m));
    }
  const json* acc = r.find(j, "accuracy");
  if (!acc) r.fail("accuracy", "missing");
  else if (!acc->is_object()) r.wrong_type("accuracy", "an object", *acc);
  else {
    r.string(*acc, "metric", "accuracy.metric", out.accuracy.metric, false);
    r.number(*acc, "relative_pct", "accuracy.relative_pct", out.accuracy.relative_pct, true);
    r.number(*acc, "candidate", "accuracy.candidate", out.accuracy.candidate, false);
    r.number(*acc, "reference", "accuracy.reference", out.accuracy.reference, false);
    r.integer(*acc, "positions", "accuracy.positions", out.accuracy.positions);
    r.boolean(*acc, "proxy", "accuracy.proxy", out.accuracy.proxy, false);
    r.string(*acc, "proxy_model", "accuracy.proxy_model", out.accuracy.proxy_model, false);
    r.number(*acc, "top1_agreement_pct", "accuracy.top1_agreement_pct", out.accuracy.top1_agreement_pct, false);
    r.string(*acc, "top1_digest", "accuracy.top1_digest", out.accuracy.top1_digest, false);
  }
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
    for (const TierMeasurement& t : r.tiers)
      tiers.push_back({{"tier", t.tier}, {"concurrency", t.concurrency}, {"duration_s", t.duration_s},
                       {"requests", t.requests}, {"output_tokens", t.output_tokens},
                       {"ttft_ms", percentiles_json(t.ttft_ms)}, {"tpot_ms", percentiles_json(t.tpot_ms)},
                       {"output_tokens_per_s", t.output_tokens_per_s}});
    j["tiers"] = tiers;
    j["accuracy"] = {{"metric", r.accuracy.metric}, {"relative_pct", r.accuracy.relative_pct},
                     {"candidate", r.accuracy.candidate}, {"reference", r.accuracy.reference},
                     {"positions", r.accuracy.positions}};
    if (r.accuracy.proxy) {
      j["accuracy"]["proxy"] = true;
      j["accuracy"]["proxy_model"] = r.accuracy.proxy_model;
    }
    if (r.accuracy.top1_agreement_pct >= 0) j["accuracy"]["top1_agreement_pct"] = r.accuracy.top1_agreement_pct;
    if (!r.accuracy.top1_digest.empty()) j["accuracy"]["top1_digest"] = r.accuracy.top1_digest;
    if (!r.quantization.method.empty())
      j["quantization"] = {{"method", r.quantization.method},
                           {"calibration_sequences", r.quantization.calibration_sequences},
                           {"held_out_skipped", r.quantization.held_out_skipped},
                           {"cached", r.quantization.cached},
                           {"seconds", r.quantization.seconds}};
    if (!r.quantization.solver.empty()) j["quantization"]["solver"] = r.quantization.solver;
    j["peak_memory_bytes"] = r.peak_memory_bytes;
    j["timings_s"] = {{"load", r.load_s}, {"accuracy", r.accuracy_s}, {"tiers", r.tiers_s}};
  }
  if (!r.backend.empty()) j["backend"] = r.backend;
  if (!r.device.empty()) j["device"] = r.device;
  if (!r.engine_build.empty()) j["engine_build"] = r.engine_build;
  json plans = json::array();
  for (const KernelPlan& p : r.plans) plans.push_back({{"op", p.op}, {"shape", p.shape}, {"choice", p.choice}});
  j["plans"] = plans;
  j["env"] = r.env;
  // Replace, not throw, should a message carry bytes that are not UTF-8 (a path, a driver's text).
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<WorkerResult> parse_worker_output(std::string_view stdout_text) {
  const std::string_view t = trimmed(stdout_text);
  if (t.empty()) return Status::Invalid("garbage output: printed nothing on stdout");
  // The result is printed last: try the whole text, then each line that opens an object, from the last. Only
  // the last few such lines: each try parses to the end of the text, so trying every line would cost quadratic
  // time on a stdout of many lines that open objects (16 MB of them would hold the daemon for hours).
  json j = json::parse(t.begin(), t.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    j = json();
    int tries = 0;
    for (size_t pos = t.rfind("\n{"); pos != std::string_view::npos && tries < kMaxResultLineTries;
         pos = pos == 0 ? std::string_view::npos : t.rfind("\n{", pos - 1), ++tries) {
      json k = json::parse(t.begin() + static_cast<std::ptrdiff_t>(pos + 1), t.end(), nullptr, false);
      if (!k.is_discarded() && k.is_object()) {
        j = std::move(k);
        break;
      }
    }
  }
  if (!j.is_object()) return Status::Invalid("garbage output: stdout is not a JSON object (starts with '" + preview(t) + "')");
  Result<WorkerResult> r = read(j);
  if (!r.ok()) return Status::Invalid("bad worker result: " + r.status().message);
  return r;
}

}  // namespace soartune
