// Typed reads of fields out of an untrusted JSON object (the worker's stdout): a wrong type is a problem naming
// the field path, never an exception; strings are kept valid UTF-8 and capped on character boundaries. Shared by
// the parsers of the worker's result (worker_result.h) and of its progress lines (worker_progress.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "core/worker_result.h"

namespace soartune::json_fields {

using nlohmann::json;

inline const char* type_name(const json& j) {
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
  // One tier's measurement (an element of "tiers"), at `path` ("tiers[0]").
  void tier(const json& e, const std::string& path, TierMeasurement& m) {
    string(e, "tier", path + ".tier", m.tier, true);
    integer(e, "concurrency", path + ".concurrency", m.concurrency);
    number(e, "duration_s", path + ".duration_s", m.duration_s, true);
    integer(e, "requests", path + ".requests", m.requests);
    integer(e, "output_tokens", path + ".output_tokens", m.output_tokens);
    percentiles(e, "ttft_ms", path + ".ttft_ms", m.ttft_ms);
    percentiles(e, "tpot_ms", path + ".tpot_ms", m.tpot_ms);
    number(e, "output_tokens_per_s", path + ".output_tokens_per_s", m.output_tokens_per_s, false);
  }
  // The accuracy object, at `path` ("accuracy").
  void accuracy(const json& a, const std::string& path, AccuracyMeasurement& out) {
    string(a, "metric", path + ".metric", out.metric, false);
    number(a, "relative_pct", path + ".relative_pct", out.relative_pct, true);
    number(a, "candidate", path + ".candidate", out.candidate, false);
    number(a, "reference", path + ".reference", out.reference, false);
    integer(a, "positions", path + ".positions", out.positions);
    boolean(a, "proxy", path + ".proxy", out.proxy, false);
    string(a, "proxy_model", path + ".proxy_model", out.proxy_model, false);
    number(a, "top1_agreement_pct", path + ".top1_agreement_pct", out.top1_agreement_pct, false);
    string(a, "top1_digest", path + ".top1_digest", out.top1_digest, false);
  }
};

inline json percentiles_json(const LatencyPercentiles& p) { return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}}; }

inline json tier_json(const TierMeasurement& t) {
  return {{"tier", t.tier}, {"concurrency", t.concurrency}, {"duration_s", t.duration_s},
          {"requests", t.requests}, {"output_tokens", t.output_tokens},
          {"ttft_ms", percentiles_json(t.ttft_ms)}, {"tpot_ms", percentiles_json(t.tpot_ms)},
          {"output_tokens_per_s", t.output_tokens_per_s}};
}

inline json accuracy_json(const AccuracyMeasurement& a) {
  json j = {{"metric", a.metric}, {"relative_pct", a.relative_pct}, {"candidate", a.candidate},
            {"reference", a.reference}, {"positions", a.positions}};
  if (a.proxy) {
    j["proxy"] = true;
    j["proxy_model"] = a.proxy_model;
  }
  if (a.top1_agreement_pct >= 0) j["top1_agreement_pct"] = a.top1_agreement_pct;
  if (!a.top1_digest.empty()) j["top1_digest"] = a.top1_digest;
  return j;
}

}  // namespace soartune::json_fields
