#include "core/worker_progress.h"

#include <nlohmann/json.hpp>

#include "core/json_fields.h"

namespace soartune {

using nlohmann::json;

std::string to_json(const WorkerProgress& p) {
  json tiers = json::array();
  for (const TierMeasurement& t : p.tiers) tiers.push_back(json_fields::tier_json(t));
  json body = {{"stage", p.stage}, {"accuracy", json_fields::accuracy_json(p.accuracy)}, {"tiers", tiers},
               {"elapsed_s", p.elapsed_s}};
  return json{{kProgressKey, body}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<std::optional<WorkerProgress>> parse_worker_progress(std::string_view line) {
  const size_t b = line.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos || line[b] != '{' || line.size() > kMaxProgressLineBytes) return std::optional<WorkerProgress>();
  // Cheap test before a parse: every other line the worker prints (the result, logs) lacks the key.
  if (line.find(kProgressKey) == std::string_view::npos) return std::optional<WorkerProgress>();
  const json j = json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::optional<WorkerProgress>();
  const auto it = j.find(kProgressKey);
  if (it == j.end()) return std::optional<WorkerProgress>();
  auto bad = [](const std::string& what) { return Status::Invalid("bad worker progress: " + what); };
  if (!it->is_object()) return bad(std::string("progress: expected an object, got ") + json_fields::type_name(*it));
  const json& p = *it;
  json_fields::Reader r;
  WorkerProgress out;
  r.string(p, "stage", "progress.stage", out.stage, true);
  r.number(p, "elapsed_s", "progress.elapsed_s", out.elapsed_s, false);
  const json* acc = r.find(p, "accuracy");
  if (!acc) r.fail("progress.accuracy", "missing");
  else if (!acc->is_object()) r.wrong_type("progress.accuracy", "an object", *acc);
  else r.accuracy(*acc, "progress.accuracy", out.accuracy);
  if (const json* tiers = r.find(p, "tiers")) {
    if (!tiers->is_array()) r.wrong_type("progress.tiers", "an array", *tiers);
    else if (tiers->size() > kMaxProgressTiers)
      r.fail("progress.tiers", std::to_string(tiers->size()) + " tiers, more than " + std::to_string(kMaxProgressTiers));
    else
      for (size_t i = 0; i < tiers->size() && !r.problem; ++i) {
        const json& e = (*tiers)[i];
        const std::string path = "progress.tiers[" + std::to_string(i) + "]";
        if (!e.is_object()) {
          r.wrong_type(path, "an object", e);
          break;
        }
        TierMeasurement m;
        r.tier(e, path, m);
        if (!r.problem && !(m.duration_s > 0)) r.fail(path + ".duration_s", "not positive");
        out.tiers.push_back(std::move(m));
      }
  }
  if (r.problem) return bad(*r.problem);
  if (out.accuracy.relative_pct < 0) return bad("progress.accuracy.relative_pct: negative");
  const std::string expected = out.tiers.empty() ? "accuracy" : out.tiers.back().tier;
  if (out.stage != expected)
    return bad("progress.stage: '" + out.stage + "' is not '" + expected + "' (" +
               (out.tiers.empty() ? "no tier measured yet" : "the last tier measured") + ")");
  return std::optional<WorkerProgress>(std::move(out));
}

}  // namespace soartune
