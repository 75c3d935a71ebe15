#include "daemon/tuner_service.h"

#include <fstream>
#include <iterator>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/grpc_status.h"
#include "daemon/request_limits.h"
#include "daemon/submission_planning.h"
#include "daemon/trial_result.h"
#include "search/budget_day.h"
#include "search/launch_export.h"
#include "daemon/bundle_export.h"

namespace soartune::daemon {

using nlohmann::json;
using soartune::Result;
using soartune::Status;

namespace {

pb::JobState job_state(JobState s) {
  switch (s) {
    case JobState::kQueued: return pb::JOB_QUEUED;
    case JobState::kRunning: return pb::JOB_RUNNING;
    case JobState::kSucceeded: return pb::JOB_SUCCEEDED;
    case JobState::kFailed: return pb::JOB_FAILED;
    case JobState::kCancelled: return pb::JOB_CANCELLED;
  }
  return pb::JOB_STATE_UNSPECIFIED;
}

pb::TrialStatus trial_status(TrialStatus s) {
  switch (s) {
    case TrialStatus::kRunning: return pb::TRIAL_RUNNING;
    case TrialStatus::kComplete: return pb::TRIAL_COMPLETE;
    case TrialStatus::kFailed: return pb::TRIAL_FAILED;
    case TrialStatus::kCancelled: return pb::TRIAL_CANCELLED;
    case TrialStatus::kPruned: return pb::TRIAL_PRUNED;
  }
  return pb::TRIAL_STATUS_UNSPECIFIED;
}

pb::FailureKind failure_kind(FailureKind k) {
  switch (k) {
    case FailureKind::kNone: return pb::FAILURE_KIND_UNSPECIFIED;
    case FailureKind::kInvalidConfig: return pb::FAILURE_INVALID_CONFIG;
    case FailureKind::kOutOfMemory: return pb::FAILURE_OUT_OF_MEMORY;
    case FailureKind::kCrash: return pb::FAILURE_CRASH;
    case FailureKind::kTimeout: return pb::FAILURE_TIMEOUT;
    case FailureKind::kExitCode: return pb::FAILURE_EXIT_CODE;
    case FailureKind::kBadOutput: return pb::FAILURE_BAD_OUTPUT;
    case FailureKind::kWorkerError: return pb::FAILURE_WORKER_ERROR;
    case FailureKind::kNotStarted: return pb::FAILURE_NOT_STARTED;
    case FailureKind::kCancelled: return pb::FAILURE_CANCELLED;
    case FailureKind::kRestart: return pb::FAILURE_RESTART;
    case FailureKind::kUnknown: return pb::FAILURE_UNKNOWN;
    case FailureKind::kNodeFailure: return pb::FAILURE_NODE_FAILURE;
    case FailureKind::kPreempted: return pb::FAILURE_PREEMPTED;
  }
  return pb::FAILURE_UNKNOWN;
}

Status require_job_id(const std::string& id) {
  if (id.empty()) return Status::Invalid("job_id: required");
  return Status::Ok();
}

// Page tokens are decimal offsets.
Result<int> page_offset(const std::string& token) {
  if (token.empty()) return 0;
  int v = 0;
  for (char c : token) {
    if (c < '0' || c > '9' || v > 100000000) return Status::Invalid("page_token: '" + token + "' is not a token from an earlier page");
    v = v * 10 + (c - '0');
  }
  return v;
}

Result<int> page_size(int requested) {
  if (requested < 0) return Status::Invalid("page_size: " + std::to_string(requested) + " is negative; allowed: 0..1000 (0: 50)");
  if (requested == 0) return 50;
  return std::min(requested, 1000);
}

double tier_duration(const TrialRecord& t, const std::string& tier) {
  for (const TierRecord& r : t.tiers)
    if (r.tier == tier) return r.duration_s;
  return std::numeric_limits<double>::infinity();
}

void to_proto(const SubmissionRecord& s, pb::Submission* out) {
  out->set_id(s.id);
  out->set_job_id(s.job_id);
  out->set_trial(s.trial);
  out->set_submitted_unix_ms(s.submitted_ms);
  out->set_budget_day(s.budget_day);
  out->set_status(s.status);
  out->set_note(s.note);
  pb::OfficialResult* r = out->mutable_result();
  r->set_s1(s.result.s1);
  r->set_s8(s.result.s8);
  r->set_sinf(s.result.sinf);
  r->set_relative_accuracy(s.result.relative_accuracy);
  r->set_c(s.result.c);
  r->set_final_score(s.result.final_score);
}

}  // namespace

void to_proto(const JobView& v, pb::Job* out) {
  const JobRecord& j = v.job;
  out->set_id(j.id);
  out->set_name(j.name);
  out->set_state(job_state(j.state));
  out->set_spec_yaml(j.spec_yaml);
  out->set_model(j.model);
  out->set_strategy(j.strategy);
  out->set_trial_budget(j.trial_budget);
  out->set_trials_done(v.trials_done);
  out->set_trials_failed(v.trials_failed);
  out->set_trials_pruned(v.trials_pruned);
  out->set_trials_running(v.trials_running);
  out->set_best_score(v.best_score);
  out->set_best_trial(v.best_trial);
  out->set_error(j.error);
  out->set_created_unix_ms(j.created_ms);
  out->set_started_unix_ms(j.started_ms);
  out->set_finished_unix_ms(j.finished_ms);
  out->set_eta_seconds(v.eta_seconds);
  out->set_stop_reason(j.stop_reason);
  for (double g : v.gate_levels) out->add_gate_levels(g);
  for (const std::string& w : v.warnings) out->add_warnings(w);
  for (double a : v.gate_above_pct) out->add_gate_above_pct(a);
}

void to_proto(const TrialRecord& t, pb::Trial* out) {
  out->set_job_id(t.job_id);
  out->set_number(t.number);
  out->set_status(trial_status(t.status));
  for (const auto& [k, v] : t.params) (*out->mutable_params())[k] = v;
  for (const TierRecord& r : t.tiers) {
    pb::TierMetrics* m = out->add_tiers();
    m->set_tier(r.tier);
    m->set_concurrency(r.concurrency);
    m->set_duration_s(r.duration_s);
    m->set_ttft_p50_ms(r.ttft_p50_ms);
    m->set_ttft_p90_ms(r.ttft_p90_ms);
    m->set_ttft_p99_ms(r.ttft_p99_ms);
    m->set_tpot_p50_ms(r.tpot_p50_ms);
    m->set_tpot_p90_ms(r.tpot_p90_ms);
    m->set_tpot_p99_ms(r.tpot_p99_ms);
    m->set_output_tokens_per_s(r.output_tokens_per_s);
  }
  out->set_relative_accuracy(t.relative_accuracy);
  out->set_accuracy_metric(t.accuracy_metric);
  out->set_accuracy_proxy(t.accuracy_proxy);
  out->set_fidelity(t.fidelity);
  if (t.early_stop) {
    pb::EarlyStop* es = out->mutable_early_stop();
    es->set_stage(t.early_stop->stage);
    es->set_bound(t.early_stop->bound);
    es->set_incumbent(t.early_stop->incumbent);
    es->set_margin(t.early_stop->margin);
  }
  out->set_score(t.score);
  out->set_gate(t.gate);
  out->set_error(t.error);
  out->set_started_unix_ms(t.started_ms);
  out->set_finished_unix_ms(t.finished_ms);
  out->set_log_tail(t.log_tail);
  out->set_engine_build(t.engine_build);
  out->set_device(t.device);
  out->set_peak_memory_bytes(t.peak_memory_bytes);
  pb::TrialTimings* tm = out->mutable_timings();
  tm->set_load_s(t.timings.load_s);
  tm->set_weights_s(t.timings.weights_s);
  tm->set_prepare_s(t.timings.prepare_s);
  tm->set_quantize_s(t.timings.quantize_s);
  tm->set_accuracy_s(t.timings.accuracy_s);
  tm->set_tiers_s(t.timings.tiers_s);
  out->set_result_json(t.result_json);
  out->set_is_reference(t.is_reference);
  out->set_failure_kind(failure_kind(t.failure_kind));
  out->set_failure_code(t.failure_code);
  for (const KernelPlan& p : t.plans) {
    pb::KernelPlan* k = out->add_plans();
    k->set_op(p.op);
    k->set_shape(p.shape);
    for (const auto& [name, value] : p.choice) (*k->mutable_choice())[name] = value;
  }
  for (const auto& [name, value] : t.env) (*out->mutable_env())[name] = value;
  json s = json::parse(t.suggestion_json, nullptr, false);
  if (!s.is_discarded() && s.is_object()) {
    pb::Suggestion* p = out->mutable_suggestion();
    p->set_strategy(s.value("strategy", ""));
    p->set_predicted_score(s.value("predicted_score", 0.0));
    p->set_predicted_score_std(s.value("predicted_score_std", 0.0));
    p->set_expected_improvement(s.value("expected_improvement", 0.0));
    p->set_p_failure(s.value("p_failure", 0.0));
    if (auto it = s.find("p_gate"); it != s.end() && it->is_array())
      for (const json& g : *it)
        if (g.is_number()) p->add_p_gate(g.get<double>());
    p->set_note(s.value("note", ""));
  }
}

grpc::Status TunerService::SubmitJob(grpc::ServerContext*, const pb::SubmitJobRequest* req, pb::Job* out) {
  if (req->spec_yaml().empty()) return to_grpc(Status::Invalid("spec_yaml: required (the job spec as YAML text)"));
  if (Status s = check_text(req->spec_yaml(), "spec_yaml", kMaxSpecBytes); !s.ok()) return to_grpc(s);
  Result<JobView> v = jobs_.submit(req->spec_yaml());
  if (!v.ok()) return to_grpc(v.status());
  to_proto(v.value(), out);
  return grpc::Status::OK;
}

grpc::Status TunerService::GetJob(grpc::ServerContext*, const pb::GetJobRequest* req, pb::Job* out) {
  if (Status s = require_job_id(req->job_id()); !s.ok()) return to_grpc(s);
  Result<JobView> v = jobs_.get_job(req->job_id());
  if (!v.ok()) return to_grpc(v.status());
  to_proto(v.value(), out);
  for (const std::string& w : daemon_warnings_) out->add_daemon_warnings(w);
  return grpc::Status::OK;
}

grpc::Status TunerService::ListJobs(grpc::ServerContext*, const pb::ListJobsRequest* req, pb::ListJobsResponse* out) {
  Result<int> size = page_size(req->page_size());
  if (!size.ok()) return to_grpc(size.status());
  Result<int> offset = page_offset(req->page_token());
  if (!offset.ok()) return to_grpc(offset.status());
  std::vector<JobView> jobs = jobs_.list_jobs(size.value() + 1, offset.value());
  // A page ends at page_size rows or at kMaxResponseBytes, whichever comes first (always at least one row).
  size_t bytes = 0;
  int n = 0;
  for (; n < static_cast<int>(jobs.size()) && n < size.value(); ++n) {
    pb::Job* j = out->add_jobs();
    to_proto(jobs[n], j);
    bytes += j->ByteSizeLong();
    if (bytes > kMaxResponseBytes && n > 0) {
      out->mutable_jobs()->RemoveLast();
      break;
    }
  }
  if (n < static_cast<int>(jobs.size())) out->set_next_page_token(std::to_string(offset.value() + n));
  return grpc::Status::OK;
}

grpc::Status TunerService::CancelJob(grpc::ServerContext*, const pb::CancelJobRequest* req, pb::Job* out) {
  if (Status s = require_job_id(req->job_id()); !s.ok()) return to_grpc(s);
  Result<JobView> v = jobs_.cancel(req->job_id());
  if (!v.ok()) return to_grpc(v.status());
  to_proto(v.value(), out);
  return grpc::Status::OK;
}

grpc::Status TunerService::WatchJob(grpc::ServerContext* ctx, const pb::WatchJobRequest* req,
                                    grpc::ServerWriter<pb::JobEvent>* writer) {
  return watch(
      req->job_id(), [ctx] { return ctx->IsCancelled(); },
      [writer](const pb::JobEvent& e) { return writer->Write(e); });
}

grpc::Status TunerService::watch(const std::string& job_id, const std::function<bool()>& cancelled,
                                 const std::function<bool(const pb::JobEvent&)>& write) {
  if (Status s = require_job_id(job_id); !s.ok()) return to_grpc(s);
  // Subscribe before the snapshot so that no event falls between them.
  Result<std::shared_ptr<Watcher>> w = jobs_.watch(job_id);
  if (!w.ok()) return to_grpc(w.status());
  Result<JobView> snap = jobs_.get_job(job_id);
  if (!snap.ok()) return to_grpc(snap.status());
  pb::JobEvent ev;
  ev.set_kind(pb::JobEvent::SNAPSHOT);
  to_proto(snap.value(), ev.mutable_job());
  ev.set_unix_ms(now_ms());
  if (!write(ev)) return grpc::Status::OK;
  if (is_terminal(snap.value().job.state)) {
    ev.set_kind(pb::JobEvent::JOB_FINISHED);
    write(ev);
    return grpc::Status::OK;
  }
  while (!cancelled()) {
    std::optional<JobEventData> e = w.value()->pop(500);
    if (!e) {
      if (w.value()->closed() || jobs_.shutting_down())
        return {grpc::StatusCode::UNAVAILABLE, "the daemon is shutting down; the job resumes when it restarts"};
      continue;
    }
    pb::JobEvent out;
    switch (e->kind) {
      case EventKind::kSnapshot: out.set_kind(pb::JobEvent::SNAPSHOT); break;
      case EventKind::kTrialStarted: out.set_kind(pb::JobEvent::TRIAL_STARTED); break;
      case EventKind::kTrialFinished: out.set_kind(pb::JobEvent::TRIAL_FINISHED); break;
      case EventKind::kTrialFailed: out.set_kind(pb::JobEvent::TRIAL_FAILED); break;
      case EventKind::kTrialPruned: out.set_kind(pb::JobEvent::TRIAL_PRUNED); break;
      case EventKind::kJobFinished: out.set_kind(pb::JobEvent::JOB_FINISHED); break;
    }
    to_proto(e->job, out.mutable_job());
    if (e->trial) to_proto(*e->trial, out.mutable_trial());
    out.set_unix_ms(e->unix_ms);
    if (!write(out)) return grpc::Status::OK;
    if (e->kind == EventKind::kJobFinished) return grpc::Status::OK;
  }
  return grpc::Status::OK;
}

grpc::Status TunerService::ListTrials(grpc::ServerContext*, const pb::ListTrialsRequest* req,
                                      pb::ListTrialsResponse* out) {
  if (Status s = require_job_id(req->job_id()); !s.ok()) return to_grpc(s);
  std::string order = req->order_by().empty() ? "number" : req->order_by();
  bool desc = order[0] == '-';
  std::string key = desc ? order.substr(1) : order;
  static const std::vector<std::string> kKeys = {"number", "score", "c1", "c8", "cinf", "accuracy"};
  if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end())
    return to_grpc(Status::Invalid("order_by: '" + order +
                                   "' is not one of number, score, c1, c8, cinf, accuracy (prefix - for descending)"));
  if (!pb::TrialStatus_IsValid(req->status()))
    return to_grpc(Status::Invalid("status: " + std::to_string(req->status()) + " is not a TrialStatus"));
  Result<int> size = page_size(req->page_size());
  if (!size.ok()) return to_grpc(size.status());
  Result<int> offset = page_offset(req->page_token());
  if (!offset.ok()) return to_grpc(offset.status());
  // The job's trials are read in place (not copied): a page costs the sort of pointers and its own rows.
  Status read = jobs_.read_trials(req->job_id(), [&](const ScoredTrials& scored) {
    std::vector<const TrialRecord*> ts;
    ts.reserve(scored.all().size());
    for (const auto& [n, t] : scored.all())
      if (req->status() == pb::TRIAL_STATUS_UNSPECIFIED || trial_status(t.status) == req->status()) ts.push_back(&t);
    auto value = [&](const TrialRecord& t) -> double {
      if (key == "number") return static_cast<double>(t.number);
      if (key == "score") return t.score;
      if (key == "accuracy") return t.status == TrialStatus::kComplete ? t.relative_accuracy : -1;
      return tier_duration(t, key);
    };
    // Trials without metrics (failed, running, cancelled) go last for every key but the number, either way.
    // all() is in number order, which the stable sort keeps among equals.
    if (key != "number" || desc)
      std::stable_sort(ts.begin(), ts.end(), [&](const TrialRecord* a, const TrialRecord* b) {
        if (key != "number") {
          const bool ca = a->status == TrialStatus::kComplete, cb = b->status == TrialStatus::kComplete;
          if (ca != cb) return ca;
          // Rankings are of full runs: screening runs (shortened workloads) follow them.
          const bool fa = a->fidelity >= 1.0, fb = b->fidelity >= 1.0;
          if (fa != fb) return fa;
        }
        double va = value(*a), vb = value(*b);
        if (va != vb) return desc ? va > vb : va < vb;
        return a->number < b->number;
      });
    out->set_total(static_cast<int>(ts.size()));
    // A page ends at page_size rows or at kMaxResponseBytes, whichever comes first (always at least one row).
    size_t bytes = 0;
    int end = offset.value();
    for (; end < static_cast<int>(ts.size()) && end < offset.value() + size.value(); ++end) {
      pb::Trial* t = out->add_trials();
      to_proto(*ts[end], t);
      bytes += t->ByteSizeLong();
      if (bytes > kMaxResponseBytes && end > offset.value()) {
        out->mutable_trials()->RemoveLast();
        break;
      }
    }
    if (end < static_cast<int>(ts.size())) out->set_next_page_token(std::to_string(end));
  });
  if (!read.ok()) return to_grpc(read);
  return grpc::Status::OK;
}

grpc::Status TunerService::GetTrial(grpc::ServerContext*, const pb::GetTrialRequest* req, pb::Trial* out) {
  if (Status s = require_job_id(req->job_id()); !s.ok()) return to_grpc(s);
  if (req->number() < 0) return to_grpc(Status::Invalid("number: must be >= 0"));
  Result<TrialRecord> t = jobs_.trial(req->job_id(), req->number());
  if (!t.ok()) return to_grpc(t.status());
  to_proto(t.value(), out);
  return grpc::Status::OK;
}

grpc::Status TunerService::GetBest(grpc::ServerContext*, const pb::GetBestRequest* req, pb::Trial* out) {
  if (Status s = require_job_id(req->job_id()); !s.ok()) return to_grpc(s);
  Result<TrialRecord> t = jobs_.best(req->job_id());
  if (!t.ok()) return to_grpc(t.status());
  to_proto(t.value(), out);
  return grpc::Status::OK;
}

grpc::Status TunerService::ExportConfig(grpc::ServerContext*, const pb::ExportConfigRequest* req,
                                        pb::ExportConfigResponse* out) {
  if (Status s = require_job_id(req->job_id()); !s.ok()) return to_grpc(s);
  Result<search::ExportFormat> format = search::parse_export_format(req->format(), "format");
  if (!format.ok()) return to_grpc(format.status());
  if (req->trial() < -1) return to_grpc(Status::Invalid("trial: must be a trial number or -1 (the best)"));
  Result<TrialRecord> t = req->trial() == -1 ? jobs_.best(req->job_id()) : jobs_.trial(req->job_id(), req->trial());
  if (!t.ok()) return to_grpc(t.status());
  if (t.value().status != TrialStatus::kComplete)
    return to_grpc(Status::Precondition("trial: trial " + std::to_string(t.value().number) + " is " +
                                        to_string(t.value().status) + "; only COMPLETE trials are exported"));
  if (t.value().fidelity < 1.0)
    return to_grpc(Status::Precondition("trial: trial " + std::to_string(t.value().number) + " ran at fidelity " +
                                        std::to_string(t.value().fidelity) +
                                        " (a screening run of a shortened workload); only full-fidelity trials are "
                                        "exported"));
  Result<std::shared_ptr<const JobSpec>> spec = jobs_.spec_of(req->job_id());
  if (!spec.ok()) return to_grpc(spec.status());
  const TrialRecord& tr = t.value();
  soartune::Config launch = soartune::config_from_text(tr.params);
  search::ExportSource src{tr.job_id, tr.number, spec.value()->model, tr.engine_build};
  const std::vector<std::string> base_args =
      spec.value()->serving ? spec.value()->serving->base_args : std::vector<std::string>{};
  std::string text;
  switch (format.value()) {
    case search::ExportFormat::kYaml: {
      char line[256];
      std::snprintf(line, sizeof line, "score %.3f, relative accuracy %.2f%% (%s%s), gate %.2f", tr.score,
                    tr.relative_accuracy, tr.accuracy_metric.c_str(),
                    tr.accuracy_proxy ? ", proxy: measured on the job's accuracy.model" : "", tr.gate);
      text = trial_yaml(*spec.value(), launch, ReferenceFile{},
                        {"soartune launch config: job " + tr.job_id + ", trial " + std::to_string(tr.number),
                         line, "engine build " + tr.engine_build + ", device " + tr.device,
                         "re-run: soartune-worker --trial <this file>"});
      break;
    }
    case search::ExportFormat::kSglangArgs: {
      Result<std::string> r = search::export_sglang_args(launch, src, base_args);
      if (!r.ok()) return to_grpc(r.status());
      text = r.value();
      break;
    }
    case search::ExportFormat::kEnvScript: {
      Result<std::string> r = search::export_env_script(launch, src, base_args);
      if (!r.ok()) return to_grpc(r.status());
      text = r.value();
      break;
    }
    case search::ExportFormat::kSglangBundle: {
      // The planner's band for this trial when it would submit it today (it plans over every COMPLETE trial;
      // no band when today's budget is spent or the trial is not among its picks).
      std::string band;
      if (Result<SubmissionPlan> plan = plan_submissions(jobs_, tr.job_id, 0, 0, now_ms()); plan.ok()) {
        for (const search::PlanPick& pick : plan.value().plan.picks) {
          if (pick.trial != tr.number) continue;
          char line[256];
          std::snprintf(line, sizeof line,
                        "official final score %.2f expected, %.2f..%.2f (10%%..90%%), a %s pick of the planner "
                        "for %s",
                        pick.predicted_score, pick.score_lo, pick.score_hi, pick.role.c_str(),
                        plan.value().today.day.c_str());
          band = line;
        }
      }
      Result<WrittenBundle> b = write_sglang_bundle(jobs_.config(), *spec.value(), tr, band);
      if (!b.ok()) return to_grpc(b.status());
      text = b.value().readme;
      out->set_bundle_dir(b.value().dir);
      // Files come back in the reply up to a total that stays under gRPC's default 4 MiB message limit; larger
      // ones (a real checkpoint) are listed with their size, to be read from bundle_dir on the daemon's host.
      constexpr uint64_t kInlineBytes = 3u << 20;
      uint64_t inlined = 0;
      for (const WrittenFile& f : b.value().files) {
        pb::BundleFile* bf = out->add_files();
        bf->set_path(f.path);
        bf->set_size_bytes(static_cast<int64_t>(f.size_bytes));
        if (inlined + f.size_bytes > kInlineBytes) continue;
        std::ifstream in(f.abs_path, std::ios::binary);
        std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (!in.good() && !in.eof()) return to_grpc(Status::Internal("cannot read " + f.abs_path));
        inlined += content.size();
        bf->set_content(std::move(content));
        bf->set_content_included(true);
      }
      break;
    }
  }
  out->set_text(text);
  out->set_format(search::to_string(format.value()));
  out->set_trial(tr.number);
  return grpc::Status::OK;
}

grpc::Status TunerService::PlanSubmissions(grpc::ServerContext*, const pb::PlanSubmissionsRequest* req,
                                           pb::PlanSubmissionsResponse* out) {
  if (Status s = require_job_id(req->job_id()); !s.ok()) return to_grpc(s);
  if (req->k() < 0) return to_grpc(Status::Invalid("k: must be >= 0 (0: all that remain today)"));
  if (!std::isfinite(req->accuracy_sigma()) || req->accuracy_sigma() < 0)
    return to_grpc(Status::Invalid("accuracy_sigma: must be >= 0 (0: the default or the learned value)"));
  Result<SubmissionPlan> plan = plan_submissions(jobs_, req->job_id(), req->k(), req->accuracy_sigma(), now_ms());
  if (!plan.ok()) return to_grpc(plan.status());
  out->set_remaining_today(plan.value().today.remaining);
  out->set_budget_day(plan.value().today.day);
  out->set_resets_at(plan.value().today.resets_at);
  for (const search::PlanPick& p : plan.value().plan.picks) {
    pb::PlanPick* pick = out->add_picks();
    pick->set_trial(p.trial);
    if (auto it = plan.value().params.find(p.trial); it != plan.value().params.end())
      for (const auto& [kk, v] : it->second) (*pick->mutable_params())[kk] = v;
    pick->set_predicted_score(p.predicted_score);
    pick->set_score_lo(p.score_lo);
    pick->set_score_hi(p.score_hi);
    for (double g : p.p_gate) pick->add_p_gate(g);
    pick->set_marginal_value(p.marginal_value);
    pick->set_role(p.role);
    pick->set_explanation(p.explanation);
    if (auto it = plan.value().accuracy_proxy.find(p.trial); it != plan.value().accuracy_proxy.end())
      pick->set_accuracy_proxy(it->second);
  }
  out->set_expected_best_score(plan.value().plan.expected_best_score);
  out->set_calibration(plan.value().plan.calibration);
  return grpc::Status::OK;
}

grpc::Status TunerService::RecordSubmission(grpc::ServerContext*, const pb::RecordSubmissionRequest* req,
                                            pb::Submission* out) {
  if (Status s = require_job_id(req->job_id()); !s.ok()) return to_grpc(s);
  if (!req->has_result()) return to_grpc(Status::Invalid("result: required (the official S1, S8, Sinf, accuracy, C, final)"));
  const pb::OfficialResult& r = req->result();
  struct Field { const char* name; double v; double hi; };
  for (const Field& f : {Field{"result.s1", r.s1(), 1000}, Field{"result.s8", r.s8(), 1000},
                         Field{"result.sinf", r.sinf(), 1000}, Field{"result.relative_accuracy", r.relative_accuracy(), 1000},
                         Field{"result.c", r.c(), 1}, Field{"result.final_score", r.final_score(), 1000}}) {
    if (!std::isfinite(f.v) || f.v < 0 || f.v > f.hi)
      return to_grpc(Status::Invalid(std::string(f.name) + ": " + std::to_string(f.v) + " is out of range; allowed: 0.." +
                                     std::to_string(static_cast<int>(f.hi))));
  }
  if (req->submitted_unix_ms() != 0) {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    if (Status s = check_timestamp(req->submitted_unix_ms(), now, "submitted_unix_ms"); !s.ok()) return to_grpc(s);
  }
  if (Status s = check_text(req->note(), "note", kMaxNoteBytes); !s.ok()) return to_grpc(s);
  // The job first, so that a NOT_FOUND below is the trial's.
  if (Result<JobView> j = jobs_.get_job(req->job_id()); !j.ok()) return to_grpc(j.status());
  Result<TrialRecord> t = jobs_.trial(req->job_id(), req->trial());
  if (!t.ok()) {
    if (t.status().code == soartune::Code::kNotFound)
      return to_grpc(Status::NotFound("trial: job " + req->job_id() + " has no trial " + std::to_string(req->trial())));
    return to_grpc(t.status());
  }
  if (t.value().status != TrialStatus::kComplete)
    return to_grpc(Status::Precondition("trial: trial " + std::to_string(req->trial()) + " is " +
                                        to_string(t.value().status) + "; only COMPLETE trials are submitted"));
  search::SubmissionBudget budget = submission_budget(jobs_, req->job_id());
  const int64_t when = req->submitted_unix_ms() == 0 ? now_ms() : req->submitted_unix_ms();
  SubmissionRecord rec;
  rec.job_id = req->job_id();
  rec.trial = req->trial();
  rec.submitted_ms = when;
  rec.budget_day = budget.budget_day(when);
  rec.result = {r.s1(), r.s8(), r.sinf(), r.relative_accuracy(), r.c(), r.final_score()};
  // C and the final score may be left 0: they follow from the official numbers by the job's scoring.
  if (Result<std::shared_ptr<const JobSpec>> spec = jobs_.spec_of(req->job_id()); spec.ok()) {
    const search::ScoringSpec& sc = spec.value()->scoring;
    if (rec.result.c == 0) rec.result.c = sc.gate_multiplier(rec.result.relative_accuracy);
    if (rec.result.final_score == 0)
      rec.result.final_score = search::final_score(sc, {rec.result.s1, rec.result.s8, rec.result.sinf}, rec.result.c);
  }
  rec.note = req->note();
  std::lock_guard<std::mutex> l(submissions_mu_);
  int used = jobs_.with_store([&](Store& s) { return s.count_submissions_on_day(rec.budget_day); });
  if (Status s = budget.check_record(when, used); !s.ok()) return to_grpc(s);
  Result<SubmissionRecord> saved = jobs_.with_store([&](Store& s) { return s.insert_submission(rec); });
  if (!saved.ok()) return to_grpc(saved.status());
  to_proto(saved.value(), out);
  return grpc::Status::OK;
}

grpc::Status TunerService::ListSubmissions(grpc::ServerContext*, const pb::ListSubmissionsRequest* req,
                                           pb::ListSubmissionsResponse* out) {
  if (!req->job_id().empty()) {
    Result<JobView> j = jobs_.get_job(req->job_id());
    if (!j.ok()) return to_grpc(j.status());
  }
  Result<int> size = page_size(req->page_size());
  if (!size.ok()) return to_grpc(size.status());
  Result<int> offset = page_offset(req->page_token());
  if (!offset.ok()) return to_grpc(offset.status());
  std::vector<SubmissionRecord> subs = jobs_.with_store(
      [&](Store& s) { return s.list_submissions(req->job_id(), size.value() + 1, offset.value()); });
  // A page ends at page_size rows or at kMaxResponseBytes, whichever comes first (always at least one row).
  size_t bytes = 0;
  int n = 0;
  for (; n < static_cast<int>(subs.size()) && n < size.value(); ++n) {
    pb::Submission* p = out->add_submissions();
    to_proto(subs[n], p);
    bytes += p->ByteSizeLong();
    if (bytes > kMaxResponseBytes && n > 0) {
      out->mutable_submissions()->RemoveLast();
      break;
    }
  }
  if (n < static_cast<int>(subs.size())) out->set_next_page_token(std::to_string(offset.value() + n));
  search::SubmissionBudget budget = submission_budget(jobs_, req->job_id());
  const int64_t now = now_ms();
  std::string day = budget.budget_day(now);
  int used = jobs_.with_store([&](Store& s) { return s.count_submissions_on_day(day); });
  search::BudgetDay today = budget.day(now, used);
  out->set_remaining_today(today.remaining);
  out->set_budget_day(today.day);
  out->set_resets_at(today.resets_at);
  return grpc::Status::OK;
}

}  // namespace soartune::daemon
