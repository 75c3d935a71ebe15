// submit, jobs, status, watch, cancel.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "daemon/cli/commands.h"
#include "daemon/cli/format.h"
#include "daemon/cli/json_out.h"

namespace soartune::cli {

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string best_text(const v1::Job& j) {
  if (j.best_trial() < 0) return "-";
  return fmt_score(j.best_score()) + " (trial " + std::to_string(j.best_trial()) + ")";
}

// The server's estimate, else one from the elapsed time per finished trial.
double eta_seconds(const v1::Job& j) {
  if (is_terminal(j.state())) return 0;
  if (j.eta_seconds() >= 0) return j.eta_seconds();
  if (j.trials_done() <= 0 || j.started_unix_ms() <= 0 || j.trial_budget() <= 0) return -1;
  const double elapsed = (now_ms() - j.started_unix_ms()) / 1000.0;
  return elapsed / j.trials_done() * std::max(0, j.trial_budget() - j.trials_done());
}

// ---- submit ----

struct SubmitOptions {
  std::string file;
  bool watch = false;
  bool plain = false;
  bool json = false;
};

int run_submit(Client& client, const SubmitOptions& o) {
  std::string text;
  if (o.file == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  } else {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) return fail(kExitUsage, "INVALID_ARGUMENT: cannot read job file " + o.file);
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  // Catch a file that is not YAML at all here, with its line; the daemon validates the fields.
  try {
    YAML::Node doc = YAML::Load(text);
    if (!doc.IsMap()) return fail(kExitUsage, "INVALID_ARGUMENT: " + o.file + ": a job spec is a YAML mapping");
  } catch (const YAML::Exception& e) {
    return fail(kExitUsage, "INVALID_ARGUMENT: " + o.file + ": line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  v1::SubmitJobRequest req;
  req.set_spec_yaml(text);
  v1::Job job;
  auto ctx = client.context();
  grpc::Status s = client.stub().SubmitJob(ctx.get(), req, &job);
  if (!s.ok()) return report(s, client);
  for (const std::string& w : job.warnings()) std::cerr << "warning: " << w << "\n";
  if (o.json && !o.watch) {
    print_json(to_json(job));
  } else {
    std::cout << job.id() << std::endl;
  }
  if (!o.watch) return kExitOk;
  return watch_job(client, job.id(), WatchOptions{o.plain, o.json});
}

// ---- jobs ----

struct JobsOptions {
  int limit = 0;
  bool json = false;
};

int run_jobs(Client& client, const JobsOptions& o) {
  std::vector<v1::Job> jobs;
  std::string token;
  do {
    v1::ListJobsRequest req;
    req.set_page_size(o.limit > 0 ? std::min(100, o.limit - static_cast<int>(jobs.size())) : 100);
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    auto ctx = client.context();
    grpc::Status s = client.stub().ListJobs(ctx.get(), req, &resp);
    if (!s.ok()) return report(s, client);
    for (const auto& j : resp.jobs()) jobs.push_back(j);
    token = resp.next_page_token();
  } while (!token.empty() && (o.limit <= 0 || static_cast<int>(jobs.size()) < o.limit));
  if (o.limit > 0 && static_cast<int>(jobs.size()) > o.limit) jobs.resize(o.limit);

  if (o.json) {
    Json arr = Json::array();
    for (const auto& j : jobs) arr.push_back(to_json(j));
    print_json(Json{{"jobs", arr}});
    return kExitOk;
  }
  if (jobs.empty()) {
    std::cout << "no jobs\n";
    return kExitOk;
  }
  Table t;
  t.add_column("id");
  t.add_column("name");
  t.add_column("state");
  t.add_column("model");
  t.add_column("strategy");
  t.add_column("trials", Table::kRight);
  t.add_column("failed", Table::kRight);
  t.add_column("best", Table::kRight);
  t.add_column("created");
  for (const auto& j : jobs) {
    t.add_row({j.id(), truncate(j.name(), 24), state_name(j.state()), truncate(j.model(), 32), j.strategy(),
               std::to_string(j.trials_done()) + "/" + std::to_string(j.trial_budget()),
               std::to_string(j.trials_failed()), best_text(j), fmt_time(j.created_unix_ms())});
  }
  t.print(std::cout);
  return kExitOk;
}

// ---- status ----

struct StatusOptions {
  std::string job;
  bool json = false;
  bool spec = false;
};

void print_job(const v1::Job& j) {
  auto row = [](const char* key, const std::string& value) {
    if (!value.empty()) std::cout << "  " << key << std::string(14 - std::string(key).size(), ' ') << value << "\n";
  };
  std::cout << "job " << j.id() << (j.name().empty() ? "" : " (" + j.name() + ")") << "\n";
  row("state", state_name(j.state()) + (j.stop_reason().empty() ? "" : ": " + j.stop_reason()));
  row("model", j.model());
  row("strategy", j.strategy());
  row("trials", std::to_string(j.trials_done()) + " of " + std::to_string(j.trial_budget()) + " done, " +
                    std::to_string(j.trials_failed()) + " failed, " +
                    (j.trials_pruned() > 0 ? std::to_string(j.trials_pruned()) + " pruned, " : "") +
                    std::to_string(j.trials_running()) + " running");
  row("best", best_text(j));
  row("created", fmt_time(j.created_unix_ms()));
  if (j.started_unix_ms() > 0) row("started", fmt_time(j.started_unix_ms()));
  if (j.finished_unix_ms() > 0) {
    row("finished", fmt_time(j.finished_unix_ms()) + " (took " +
                        fmt_elapsed((j.finished_unix_ms() - j.started_unix_ms()) / 1000.0) + ")");
  } else if (j.started_unix_ms() > 0) {
    row("elapsed", fmt_elapsed((now_ms() - j.started_unix_ms()) / 1000.0));
    const double eta = eta_seconds(j);
    if (eta >= 0) row("eta", fmt_elapsed(eta));
  }
  row("error", j.error());
  for (const std::string& w : j.daemon_warnings()) row("warning", "soartuned: " + w);
}

int run_status(Client& client, const StatusOptions& o) {
  v1::Job job;
  grpc::Status s = fetch_job(client, o.job, &job);
  if (!s.ok()) return report(s, client);
  if (o.json) {
    print_json(to_json(job, /*with_spec=*/true));
  } else if (o.spec) {
    std::cout << job.spec_yaml();
    if (!job.spec_yaml().empty() && job.spec_yaml().back() != '\n') std::cout << "\n";
  } else {
    print_job(job);
  }
  return kExitOk;
}

// ---- cancel ----

struct CancelOptions {
  std::string job;
  bool json = false;
};

int run_cancel(Client& client, const CancelOptions& o) {
  v1::CancelJobRequest req;
  req.set_job_id(o.job);
  v1::Job job;
  auto ctx = client.context();
  grpc::Status s = client.stub().CancelJob(ctx.get(), req, &job);
  if (!s.ok()) return report(s, client);
  if (o.json) {
    print_json(to_json(job));
  } else {
    std::cout << "job " << job.id() << ": " << state_name(job.state()) << "\n";
  }
  return kExitOk;
}

// ---- watch ----

// Renders the event stream: on a terminal a progress bar redrawn in place with event lines above it,
// otherwise one line per event.
class WatchView {
 public:
  WatchView(Client& client, std::string job_id, const WatchOptions& o)
      : client_(client), job_id_(std::move(job_id)), json_(o.json), tty_(!o.plain && !o.json && isatty(STDOUT_FILENO)) {}

  void on_event(const v1::JobEvent& e) {
    if (e.has_job()) job_ = e.job();
    if (json_) {
      print_json_line(to_json(e));
      return;
    }
    switch (e.kind()) {
      case v1::JobEvent::SNAPSHOT:
        line("watching job " + job_.id() + (job_.name().empty() ? "" : " (" + job_.name() + ")") + ": " +
             state_name(job_.state()) + ", " + progress_text());
        break;
      case v1::JobEvent::TRIAL_STARTED:
        line("trial " + std::to_string(e.trial().number()) + " started: " + params_text(e.trial()) +
             strategy_text(e.trial()));
        break;
      case v1::JobEvent::TRIAL_FINISHED:
        line(finished_text(e.trial()) + "  [" + progress_text() + "]");
        break;
      case v1::JobEvent::TRIAL_FAILED:
        line("trial " + std::to_string(e.trial().number()) + " " + status_name(e.trial().status()) + ": " +
             truncate(e.trial().error().empty() ? "no reason given" : e.trial().error(), 160) + "  [" +
             progress_text() + "]");
        break;
      case v1::JobEvent::TRIAL_PRUNED:
        line("trial " + std::to_string(e.trial().number()) + " PRUNED: " + truncate(e.trial().error(), 160) + "  [" +
             progress_text() + "]");
        break;
      case v1::JobEvent::JOB_FINISHED:
        break;   // the caller prints the final line
      default:
        break;
    }
  }

  void set_job(const v1::Job& j) { job_ = j; }
  const v1::Job& job() const { return job_; }

  void notice(const std::string& text) {
    clear_bar();
    std::cerr << text << std::endl;
    draw_bar();
  }

  void finish() {
    if (json_) return;
    clear_bar();
    std::string text = "job " + job_.id() + " " + state_name(job_.state());
    if (!job_.stop_reason().empty()) text += " (" + job_.stop_reason() + ")";
    text += ": " + std::to_string(job_.trials_done()) + " trials, " + std::to_string(job_.trials_failed()) +
            " failed, " + (job_.trials_pruned() > 0 ? std::to_string(job_.trials_pruned()) + " pruned, " : "") +
            "best " + best_text(job_);
    if (!job_.error().empty()) text += "; error: " + job_.error();
    std::cout << text << std::endl;
  }

 private:
  void line(const std::string& text) {
    clear_bar();
    std::cout << text << "\n";
    if (tty_) {
      draw_bar();
    } else {
      std::cout.flush();
    }
  }

  void clear_bar() {
    if (tty_ && bar_shown_) {
      std::cout << "\r\033[K";
      bar_shown_ = false;
    }
  }

  void draw_bar() {
    if (!tty_) return;
    constexpr int kWidth = 24;
    const int budget = std::max(1, job_.trial_budget());
    const int filled = std::clamp(job_.trials_done() * kWidth / budget, 0, kWidth);
    std::string bar = "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] " + progress_text();
    if (job_.trials_running() > 0) bar += "  running " + std::to_string(job_.trials_running());
    const double eta = eta_seconds(job_);
    if (eta >= 0 && !is_terminal(job_.state()) && job_.trials_done() < job_.trial_budget()) {
      bar += "  ETA " + fmt_elapsed(eta);
    }
    std::cout << "\r\033[K" << bar << std::flush;
    bar_shown_ = true;
  }

  std::string progress_text() const {
    std::string s = std::to_string(job_.trials_done()) + "/" + std::to_string(job_.trial_budget()) + " trials";
    if (job_.trials_failed() > 0) s += ", " + std::to_string(job_.trials_failed()) + " failed";
    if (job_.trials_pruned() > 0) s += ", " + std::to_string(job_.trials_pruned()) + " pruned";
    s += ", best " + best_text(job_);
    return s;
  }

  std::string params_text(const v1::Trial& t) {
    if (t.number() == 0) return "(reference)";
    if (!reference_loaded_) {
      reference_ = reference_params(client_, job_id_);
      reference_loaded_ = true;
    }
    if (reference_.empty()) return params_brief(t.params());
    return params_vs(t.params(), reference_);
  }

  static std::string strategy_text(const v1::Trial& t) {
    if (!t.has_suggestion() || t.suggestion().strategy().empty() || t.suggestion().strategy() == "reference") {
      return "";
    }
    const auto& s = t.suggestion();
    std::string out = "  [" + s.strategy();
    if (s.predicted_score_std() > 0) {
      out += ", predicted " + fmt_score(s.predicted_score()) + " ± " + fmt_score(s.predicted_score_std());
    }
    return out + "]";
  }

  std::string finished_text(const v1::Trial& t) {
    if (t.number() == 0) {
      reference_ = t.params();
      reference_loaded_ = true;
    }
    std::string s = "trial " + std::to_string(t.number()) + " " + status_name(t.status()) + ": score " +
                    fmt_score(t.score()) + "  C " + fmt_gate(t.gate()) + "  acc " + fmt_accuracy(t.relative_accuracy()) +
                    (t.accuracy_proxy() ? " proxy" : "");
    for (const auto& m : t.tiers()) s += "  " + m.tier() + " " + fmt_duration(m.duration_s()) + "s";
    return s;
  }

  Client& client_;
  std::string job_id_;
  bool json_;
  bool tty_;
  bool bar_shown_ = false;
  v1::Job job_;
  google::protobuf::Map<std::string, std::string> reference_;
  bool reference_loaded_ = false;
};

}  // namespace

grpc::Status fetch_job(Client& client, const std::string& job_id, v1::Job* job) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  auto ctx = client.context();
  return client.stub().GetJob(ctx.get(), req, job);
}

google::protobuf::Map<std::string, std::string> reference_params(Client& client, const std::string& job_id) {
  v1::GetTrialRequest req;
  req.set_job_id(job_id);
  req.set_number(0);
  v1::Trial t;
  auto ctx = client.context();
  if (!client.stub().GetTrial(ctx.get(), req, &t).ok()) return {};
  return t.params();
}

int watch_job(Client& client, const std::string& job_id, const WatchOptions& options) {
  WatchView view(client, job_id, options);
  bool finished = false;
  bool connected_once = false;
  while (!finished) {
    grpc::ClientContext ctx;   // no deadline: a job runs as long as it runs
    if (connected_once) ctx.set_wait_for_ready(true);
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    auto reader = client.stub().WatchJob(&ctx, req);
    v1::JobEvent event;
    while (reader->Read(&event)) {
      connected_once = true;
      view.on_event(event);
      if (event.kind() == v1::JobEvent::JOB_FINISHED ||
          (event.kind() == v1::JobEvent::SNAPSHOT && is_terminal(event.job().state()))) {
        finished = true;
        ctx.TryCancel();
        break;
      }
    }
    grpc::Status s = reader->Finish();
    if (finished) break;
    if (s.ok()) {
      // The stream ended without a JOB_FINISHED event: ask for the job's state.
      v1::Job job;
      grpc::Status g = fetch_job(client, job_id, &job);
      if (!g.ok()) return report(g, client);
      view.set_job(job);
      if (is_terminal(job.state())) break;
      return fail(kExitError, "the watch of job " + job_id + " ended while the job is " + state_name(job.state()));
    }
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && connected_once) {
      // The daemon went away mid-job (restart, crash): wait for it to come back, then resume from a new
      // snapshot. A restarted daemon resumes the job's trials from the store.
      view.notice("lost the connection to soartuned at " + client.addr() + "; waiting up to " +
                  fmt_elapsed(client.timeout_s()) + " for it to return");
      v1::Job job;
      v1::GetJobRequest get;
      get.set_job_id(job_id);
      auto patient = client.patient_context();
      grpc::Status g = client.stub().GetJob(patient.get(), get, &job);
      if (!g.ok()) {
        return report(g.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                          ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "it did not return")
                          : g,
                      client);
      }
      continue;
    }
    return report(s, client);
  }
  view.finish();
  return view.job().state() == v1::JOB_SUCCEEDED ? kExitOk : kExitError;
}

void add_job_commands(CLI::App& app, Context& ctx) {
  {
    auto o = std::make_shared<SubmitOptions>();
    auto* sub = app.add_subcommand("submit", "Submit a job spec (YAML; '-' reads stdin) and print the job id");
    sub->add_option("file", o->file, "job spec, e.g. configs/jobs/demo.yaml")->required();
    sub->add_flag("--watch,-w", o->watch, "then watch the job until it finishes (exit code as for watch)");
    sub->add_flag("--plain", o->plain, "with --watch: one line per event even on a terminal");
    sub->add_flag("--json", o->json, "print the job as JSON (with --watch: one JSON object per event)");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_submit(c, *o); }; });
  }
  {
    auto o = std::make_shared<JobsOptions>();
    auto* sub = app.add_subcommand("jobs", "List jobs, newest first");
    sub->add_option("--limit,-n", o->limit, "at most N jobs (0: all)");
    sub->add_flag("--json", o->json, "machine-readable output");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_jobs(c, *o); }; });
  }
  {
    auto o = std::make_shared<StatusOptions>();
    auto* sub = app.add_subcommand("status", "Show a job's state and progress");
    sub->add_option("job", o->job, "job id")->required();
    sub->add_flag("--json", o->json, "machine-readable output (includes the spec)");
    sub->add_flag("--spec", o->spec, "print the submitted job spec");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_status(c, *o); }; });
  }
  {
    auto job = std::make_shared<std::string>();
    auto o = std::make_shared<WatchOptions>();
    auto* sub = app.add_subcommand(
        "watch", "Follow a job until it finishes; exit code 0 if it SUCCEEDED, 1 if it FAILED or was CANCELLED");
    sub->add_option("job", *job, "job id")->required();
    sub->add_flag("--plain", o->plain, "one line per event even on a terminal");
    sub->add_flag("--json", o->json, "one JSON object per event (JSON lines)");
    sub->callback([&ctx, job, o] { ctx.action = [job, o](Client& c) { return watch_job(c, *job, *o); }; });
  }
  {
    auto o = std::make_shared<CancelOptions>();
    auto* sub = app.add_subcommand("cancel", "Cancel a job (its running trials are stopped)");
    sub->add_option("job", o->job, "job id")->required();
    sub->add_flag("--json", o->json, "print the job as JSON");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_cancel(c, *o); }; });
  }
}

}  // namespace soartune::cli
