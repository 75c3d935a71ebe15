#include "daemon/trial_result.h"

#include <cmath>
#include <csignal>
#include <sstream>

#include "core/utf8.h"
#include "core/worker_result.h"

namespace soartune::daemon {

namespace {

std::string worker_error_text(const WorkerError& e) {
  if (e.message.empty() && e.field.empty()) return "";
  return e.field.empty() ? e.message : e.field + ": " + e.message;
}

// Checks that an ok result has what the score needs and copies it into `t`; returns the problem, or "".
std::string read_metrics(const WorkerResult& r, TrialRecord& t) {
  t.tiers.clear();
  for (int k = 0; k < search::kTiers; ++k) {
    const std::string name = search::kTierNames[k];
    const TierMeasurement* found = nullptr;
    for (const TierMeasurement& m : r.tiers)
      if (m.tier == name) found = &m;
    if (!found) return "tier " + name + " missing";
    if (!(found->duration_s > 0)) return "tier " + name + ": duration_s missing or not positive";
    t.tiers.push_back(tier_record(*found));
  }
  if (r.accuracy.relative_pct < 0) return "accuracy.relative_pct is negative";
  t.relative_accuracy = r.accuracy.relative_pct;
  t.accuracy_metric = r.accuracy.metric;
  t.accuracy_proxy = r.accuracy.proxy;
  return "";
}

std::string mib(size_t bytes) {
  std::ostringstream m;
  m << static_cast<double>(bytes) / (1u << 20) << " MiB";
  return m.str();
}

// A run whose stdout passed its cap kept the first out.size() bytes (the cap) and the last out_tail.size().
std::string truncation_note(const ProcessResult& run) {
  return "worker output truncated: stdout was " + std::to_string(run.stdout_bytes) + " bytes, past its cap of " +
         mib(run.out.size()) + "; only the first " + mib(run.out.size()) + " and the last " + mib(run.out_tail.size()) +
         " were kept";
}

TrialOutcome decide(const ProcessResult& run, double timeout_s, const Result<WorkerResult>& parsed, TrialRecord& t) {
  TrialOutcome o;
  auto fail = [&](FailureKind kind, std::string reason, int code = 0) {
    o.status = TrialStatus::kFailed;
    o.failure_kind = kind;
    o.failure_code = code;
    o.error = std::move(reason);
    return o;
  };
  const bool have = parsed.ok();
  if (!run.started) return fail(FailureKind::kNotStarted, "worker did not start: " + run.spawn_error);
  if (run.cancelled) {
    o.status = TrialStatus::kCancelled;
    o.failure_kind = FailureKind::kCancelled;
    o.error = "cancelled";
    return o;
  }
  if (run.timed_out) {
    std::ostringstream m;
    m << "timeout: no result within " << timeout_s << " s; worker killed";
    return fail(FailureKind::kTimeout, m.str());
  }
  if (!run.exited) {
    const int sig = run.term_signal;
    std::string reason = "worker crashed: killed by " + signal_name(sig);
    if (sig == SIGKILL)
      return fail(FailureKind::kOutOfMemory, reason + " (not by the daemon: likely the out-of-memory killer)", sig);
    std::string last = last_lines(run.err_tail, 1, 200);
    if (!last.empty()) reason += "; last stderr line: " + last;
    return fail(FailureKind::kCrash, reason, sig);
  }
  if (run.exit_code != 0) {
    std::string reason = "worker exit code " + std::to_string(run.exit_code);
    const bool reported = have && !parsed.value().ok;
    const std::string werr = reported ? worker_error_text(parsed.value().error) : "";
    if (!werr.empty()) {
      reason += ": " + werr;
    } else {
      std::string last = last_lines(run.err_tail, 1, 200);
      if (!last.empty()) reason += "; last stderr line: " + last;
    }
    // The worker said what went wrong: its kind; exit 2 with a JSON error is its documented "bad config or
    // model" whatever the kind says. Without a report the exit status is all there is.
    if (reported)
      return fail(run.exit_code == 2 ? FailureKind::kInvalidConfig : parsed.value().error.kind, reason, run.exit_code);
    return fail(FailureKind::kExitCode, reason, run.exit_code);
  }
  if (!have) {
    if (run.stdout_truncated)
      return fail(FailureKind::kBadOutput, truncation_note(run) + ", and the last holds no complete result line (" +
                                               parsed.status().message + ")");
    return fail(FailureKind::kBadOutput, parsed.status().message);
  }
  const WorkerResult& r = parsed.value();
  if (!r.ok) {
    const std::string werr = worker_error_text(r.error);
    return fail(r.error.kind, "worker reported failure: " + (werr.empty() ? std::string("no error message") : werr));
  }
  if (std::string problem = read_metrics(r, t); !problem.empty())
    return fail(FailureKind::kBadOutput, "bad worker result: " + problem);
  o.status = TrialStatus::kComplete;
  return o;
}

}  // namespace

TrialOutcome interpret_worker_run(const ProcessResult& run, double timeout_s, TrialRecord& t) {
  t.log_tail = valid_utf8(last_lines(run.err_tail, 40, 8192));
  // Past the cap only stdout's tail can hold the result, which the worker prints last: read it from there, and
  // say in the log that the output was cut (a good result with too much logging is still a good result).
  t.env = run.timing_env;   // as the daemon started the worker
  Result<WorkerResult> parsed = parse_worker_output(run.stdout_truncated ? run.out_tail : run.out);
  if (run.stdout_truncated && parsed.ok())
    t.log_tail += (t.log_tail.empty() ? "" : "\n") + std::string("soartuned: ") + truncation_note(run) +
                  "; the result line was read from the last";
  if (parsed.ok()) {
    const WorkerResult& r = parsed.value();
    t.engine_build = r.engine_build;
    if (!r.device.empty()) t.device = r.device;
    t.peak_memory_bytes = r.peak_memory_bytes;
    t.timings = TrialTimings{r.load_s, r.weights_s, r.prepare_s, r.quantization.seconds, r.accuracy_s, r.tiers_s};
    t.plans = r.plans;
    t.result_json = to_json(r);
  } else {
    t.result_json = valid_utf8(utf8_prefix(run.out, 1u << 20));
  }
  TrialOutcome o = decide(run, timeout_s, parsed, t);
  o.error = valid_utf8(o.error);
  t.failure_kind = o.failure_kind;
  t.failure_code = o.failure_code;
  return o;
}

TierRecord tier_record(const TierMeasurement& m) {
  TierRecord r;
  r.tier = m.tier;
  r.concurrency = m.concurrency;
  r.duration_s = m.duration_s;
  r.ttft_p50_ms = m.ttft_ms.p50;
  r.ttft_p90_ms = m.ttft_ms.p90;
  r.ttft_p99_ms = m.ttft_ms.p99;
  r.tpot_p50_ms = m.tpot_ms.p50;
  r.tpot_p90_ms = m.tpot_ms.p90;
  r.tpot_p99_ms = m.tpot_ms.p99;
  r.output_tokens_per_s = m.output_tokens_per_s;
  return r;
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
