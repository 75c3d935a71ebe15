#include "daemon/trial_result.h"

#include <cmath>
#include <csignal>
#include <sstream>

#include <nlohmann/json.hpp>

namespace soartune::daemon {

using nlohmann::json;

namespace {

std::string trimmed(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string preview(const std::string& s) {
  std::string p = trimmed(s).substr(0, 80);
  for (char& c : p)
    if (c == '\n' || c == '\r' || static_cast<unsigned char>(c) < 32) c = ' ';
  return p;
}

// The worker prints one JSON object; tolerate log lines before it by falling back on the last line that
// parses as an object.
bool parse_result(const std::string& out, json& j) {
  std::string t = trimmed(out);
  if (t.empty()) return false;
  j = json::parse(t, nullptr, false);
  if (!j.is_discarded() && j.is_object()) return true;
  // From the last line that opens an object: the result is printed last.
  for (size_t pos = t.rfind("\n{"); pos != std::string::npos; pos = pos == 0 ? std::string::npos : t.rfind("\n{", pos - 1)) {
    json k = json::parse(t.substr(pos + 1), nullptr, false);
    if (!k.is_discarded() && k.is_object()) {
      j = std::move(k);
      return true;
    }
  }
  return false;
}

double num(const json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return fallback;
  return it->get<double>();
}

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

bool mentions_oom(const std::string& s) {
  std::string l;
  for (char c : s) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l.find("out of memory") != std::string::npos || l.find("bad_alloc") != std::string::npos ||
         l.find("cudaerrormemoryallocation") != std::string::npos;
}

std::string worker_error_text(const json& j) {
  auto it = j.find("error");
  if (it == j.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_object()) return it->dump();
  std::string field = str(*it, "field"), message = str(*it, "message");
  return field.empty() ? message : field + ": " + message;
}

// Checks the metrics of an ok result and copies them into `t`; returns the problem, or "".
std::string read_metrics(const json& j, TrialRecord& t) {
  auto tiers = j.find("tiers");
  if (tiers == j.end() || !tiers->is_array()) return "no tiers array";
  t.tiers.clear();
  for (int k = 0; k < search::kTiers; ++k) {
    const std::string name = search::kTierNames[k];
    const json* found = nullptr;
    for (const json& tj : *tiers)
      if (tj.is_object() && str(tj, "tier") == name) found = &tj;
    if (!found) return "tier " + name + " missing";
    const json& tj = *found;
    TierRecord r;
    r.tier = name;
    r.concurrency = static_cast<int>(num(tj, "concurrency", search::kTierConcurrency[k]));
    r.duration_s = num(tj, "duration_s", -1);
    if (!std::isfinite(r.duration_s) || r.duration_s <= 0) return "tier " + name + ": duration_s missing or not positive";
    if (auto it = tj.find("ttft_ms"); it != tj.end() && it->is_object()) {
      r.ttft_p50_ms = num(*it, "p50");
      r.ttft_p90_ms = num(*it, "p90");
      r.ttft_p99_ms = num(*it, "p99");
    }
    if (auto it = tj.find("tpot_ms"); it != tj.end() && it->is_object()) {
      r.tpot_p50_ms = num(*it, "p50");
      r.tpot_p90_ms = num(*it, "p90");
      r.tpot_p99_ms = num(*it, "p99");
    }
    r.output_tokens_per_s = num(tj, "output_tokens_per_s");
    t.tiers.push_back(r);
  }
  auto acc = j.find("accuracy");
  if (acc == j.end() || !acc->is_object()) return "no accuracy object";
  t.relative_accuracy = num(*acc, "relative_pct", NAN);
  if (!std::isfinite(t.relative_accuracy) || t.relative_accuracy < 0) return "accuracy.relative_pct missing or invalid";
  t.accuracy_metric = str(*acc, "metric");
  return "";
}

}  // namespace

TrialOutcome interpret_worker_run(const ProcessResult& run, double timeout_s, TrialRecord& t) {
  TrialOutcome o;
  t.log_tail = last_lines(run.err_tail, 40, 8192);
  t.result_json = run.out.size() > (1u << 20) ? run.out.substr(0, 1u << 20) : run.out;
  json j;
  bool have_json = parse_result(run.out, j);
  if (have_json) {
    t.engine_build = str(j, "engine_build");
    if (!str(j, "device").empty()) t.device = str(j, "device");
    t.peak_memory_bytes = static_cast<int64_t>(num(j, "peak_memory_bytes"));
    t.result_json = j.dump();
  }
  auto fail = [&](std::string kind, std::string reason) {
    o.status = TrialStatus::kFailed;
    o.failure_kind = std::move(kind);
    o.error = std::move(reason);
    return o;
  };
  if (!run.started) return fail("crash", "worker did not start: " + run.spawn_error);
  if (run.cancelled) {
    o.status = TrialStatus::kCancelled;
    o.error = "cancelled";
    return o;
  }
  if (run.timed_out) {
    std::ostringstream m;
    m << "timeout: no result within " << timeout_s << " s; worker killed";
    return fail("timeout", m.str());
  }
  if (!run.exited) {
    int sig = run.term_signal;
    std::string reason = "worker crashed: killed by " + signal_name(sig);
    if (sig == SIGKILL) return fail("out of memory", reason + " (not by the daemon: likely the out-of-memory killer)");
    std::string last = last_lines(run.err_tail, 1, 200);
    if (!last.empty()) reason += "; last stderr line: " + last;
    return fail("crash", reason);
  }
  if (run.exit_code != 0) {
    std::string reason = "worker exit code " + std::to_string(run.exit_code);
    std::string werr = have_json ? worker_error_text(j) : "";
    if (!werr.empty()) {
      reason += ": " + werr;
    } else {
      std::string last = last_lines(run.err_tail, 1, 200);
      if (!last.empty()) reason += "; last stderr line: " + last;
    }
    if (mentions_oom(werr) || (!have_json && mentions_oom(run.err_tail))) return fail("out of memory", reason);
    if (run.exit_code == 2 && have_json) return fail("invalid config", reason);
    return fail("exit code " + std::to_string(run.exit_code), reason);
  }
  if (!have_json)
    return fail("bad output", run.out.empty() ? "garbage output: the worker exited 0 but printed nothing on stdout"
                                              : "garbage output: stdout is not a JSON object (starts with '" +
                                                    preview(run.out) + "')");
  if (!j.value("ok", false)) {
    std::string werr = worker_error_text(j);
    return fail(mentions_oom(werr) ? "out of memory" : "bad output",
                "worker reported failure: " + (werr.empty() ? std::string("no error message") : werr));
  }
  if (std::string problem = read_metrics(j, t); !problem.empty())
    return fail("bad output", "bad worker result: " + problem);
  o.status = TrialStatus::kComplete;
  return o;
}

search::TrialMetrics metrics_of(const TrialRecord& t) {
  search::TrialMetrics m;
  for (int k = 0; k < search::kTiers; ++k) {
    m.duration_s[k] = 0;
    for (const TierRecord& r : t.tiers)
      if (r.tier == search::kTierNames[k]) m.duration_s[k] = r.duration_s;
  }
  m.relative_accuracy_pct = t.relative_accuracy;
  return m;
}

}  // namespace soartune::daemon
