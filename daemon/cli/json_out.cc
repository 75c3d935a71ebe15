#include "daemon/cli/json_out.h"

#include <iostream>

#include "daemon/cli/format.h"

namespace soartune::cli {

namespace {

Json params_json(const google::protobuf::Map<std::string, std::string>& params) {
  std::map<std::string, std::string> sorted(params.begin(), params.end());
  Json out = Json::object();
  for (const auto& [k, v] : sorted) out[k] = v;
  return out;
}

Json doubles(const google::protobuf::RepeatedField<double>& xs) {
  Json out = Json::array();
  for (double x : xs) out.push_back(x);
  return out;
}

}  // namespace

Json to_json(const v1::Job& j, bool with_spec) {
  Json out;
  out["id"] = j.id();
  out["name"] = j.name();
  out["state"] = state_name(j.state());
  out["model"] = j.model();
  out["strategy"] = j.strategy();
  out["trial_budget"] = j.trial_budget();
  out["trials_done"] = j.trials_done();
  out["trials_failed"] = j.trials_failed();
  out["trials_pruned"] = j.trials_pruned();
  out["trials_running"] = j.trials_running();
  out["best_score"] = j.best_score();
  out["best_trial"] = j.best_trial();
  out["error"] = j.error();
  out["stop_reason"] = j.stop_reason();
  if (j.daemon_warnings_size() > 0) {
    Json warnings = Json::array();
    for (const std::string& w : j.daemon_warnings()) warnings.push_back(w);
    out["daemon_warnings"] = warnings;
  }
  out["created_unix_ms"] = j.created_unix_ms();
  out["started_unix_ms"] = j.started_unix_ms();
  out["finished_unix_ms"] = j.finished_unix_ms();
  out["eta_seconds"] = j.eta_seconds();
  out["warnings"] = Json::array();
  for (const auto& w : j.warnings()) out["warnings"].push_back(w);
  if (with_spec) out["spec_yaml"] = j.spec_yaml();
  return out;
}

Json to_json(const v1::Suggestion& s) {
  Json out;
  out["strategy"] = s.strategy();
  out["predicted_score"] = s.predicted_score();
  out["predicted_score_std"] = s.predicted_score_std();
  out["expected_improvement"] = s.expected_improvement();
  out["p_failure"] = s.p_failure();
  out["p_gate"] = doubles(s.p_gate());
  out["note"] = s.note();
  return out;
}

Json to_json(const v1::Trial& t, bool full) {
  Json out;
  out["job_id"] = t.job_id();
  out["number"] = t.number();
  out["status"] = status_name(t.status());
  out["params"] = params_json(t.params());
  Json durations = Json::object();
  Json tiers = Json::array();
  for (const auto& m : t.tiers()) {
    durations[m.tier()] = m.duration_s();
    Json tier;
    tier["tier"] = m.tier();
    tier["concurrency"] = m.concurrency();
    tier["duration_s"] = m.duration_s();
    tier["ttft_p50_ms"] = m.ttft_p50_ms();
    tier["ttft_p90_ms"] = m.ttft_p90_ms();
    tier["ttft_p99_ms"] = m.ttft_p99_ms();
    tier["tpot_p50_ms"] = m.tpot_p50_ms();
    tier["tpot_p90_ms"] = m.tpot_p90_ms();
    tier["tpot_p99_ms"] = m.tpot_p99_ms();
    tier["output_tokens_per_s"] = m.output_tokens_per_s();
    tiers.push_back(std::move(tier));
  }
  out["duration_s"] = std::move(durations);
  out["tiers"] = std::move(tiers);
  out["relative_accuracy"] = t.relative_accuracy();
  out["accuracy_metric"] = t.accuracy_metric();
  out["accuracy_proxy"] = t.accuracy_proxy();
  out["fidelity"] = t.fidelity() > 0 ? t.fidelity() : 1.0;   // 0: a daemon from before fidelities, all full runs
  out["score"] = t.score();
  out["gate"] = t.gate();
  out["error"] = t.error();
  out["started_unix_ms"] = t.started_unix_ms();
  out["finished_unix_ms"] = t.finished_unix_ms();
  out["engine_build"] = t.engine_build();
  out["device"] = t.device();
  out["peak_memory_bytes"] = t.peak_memory_bytes();
  out["timings"] = {{"load_s", t.timings().load_s()},         {"weights_s", t.timings().weights_s()},
                    {"prepare_s", t.timings().prepare_s()},   {"quantize_s", t.timings().quantize_s()},
                    {"accuracy_s", t.timings().accuracy_s()}, {"tiers_s", t.timings().tiers_s()}};
  out["is_reference"] = t.is_reference();
  if (t.has_early_stop()) {
    out["early_stop"] = {{"stage", t.early_stop().stage()}, {"bound", t.early_stop().bound()},
                         {"incumbent", t.early_stop().incumbent()}, {"margin", t.early_stop().margin()}};
  }
  if (t.failure_kind() != v1::FAILURE_KIND_UNSPECIFIED) {
    out["failure_kind"] = failure_name(t.failure_kind());
    out["failure_code"] = t.failure_code();
  }
  if (t.has_suggestion()) out["suggestion"] = to_json(t.suggestion());
  if (full) {
    Json plans = Json::array();
    for (const auto& p : t.plans()) {
      Json plan;
      plan["op"] = p.op();
      plan["shape"] = p.shape();
      plan["choice"] = params_json(p.choice());
      plans.push_back(std::move(plan));
    }
    out["plans"] = std::move(plans);
    out["env"] = params_json(t.env());
    out["log_tail"] = t.log_tail();
    auto parsed = Json::parse(t.result_json(), nullptr, /*allow_exceptions=*/false);
    if (!t.result_json().empty() && !parsed.is_discarded()) {
      out["result"] = std::move(parsed);
    } else {
      out["result_json"] = t.result_json();
    }
  }
  return out;
}

Json to_json(const v1::Submission& s) {
  Json out;
  out["id"] = s.id();
  out["job_id"] = s.job_id();
  out["trial"] = s.trial();
  out["submitted_unix_ms"] = s.submitted_unix_ms();
  out["budget_day"] = s.budget_day();
  out["status"] = s.status();
  Json r;
  r["s1"] = s.result().s1();
  r["s8"] = s.result().s8();
  r["sinf"] = s.result().sinf();
  r["relative_accuracy"] = s.result().relative_accuracy();
  r["c"] = s.result().c();
  r["final_score"] = s.result().final_score();
  out["result"] = std::move(r);
  out["note"] = s.note();
  return out;
}

Json to_json(const v1::PlanPick& p) {
  Json out;
  out["trial"] = p.trial();
  out["role"] = p.role();
  out["accuracy_proxy"] = p.accuracy_proxy();
  out["params"] = params_json(p.params());
  out["predicted_score"] = p.predicted_score();
  out["score_lo"] = p.score_lo();
  out["score_hi"] = p.score_hi();
  out["p_gate"] = doubles(p.p_gate());
  out["marginal_value"] = p.marginal_value();
  out["explanation"] = p.explanation();
  return out;
}

Json to_json(const v1::JobEvent& e) {
  Json out;
  std::string kind = v1::JobEvent::Kind_Name(e.kind());
  out["kind"] = kind;
  out["unix_ms"] = e.unix_ms();
  if (e.has_job()) out["job"] = to_json(e.job());
  if (e.has_trial()) out["trial"] = to_json(e.trial());
  return out;
}

void print_json(const Json& j) { std::cout << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n"; }

void print_json_line(const Json& j) {
  std::cout << j.dump(-1, ' ', false, Json::error_handler_t::replace) << std::endl;
}

}  // namespace soartune::cli
