// plan, record, submissions: the daily official-submission budget.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>

#include "daemon/cli/commands.h"
#include "daemon/cli/format.h"
#include "daemon/cli/json_out.h"

namespace soartune::cli {

namespace {

// Unix milliseconds, or RFC 3339 ("2026-12-02T16:15:30Z", "2026-12-02T16:15:30.5+08:00"); nullopt otherwise.
std::optional<int64_t> parse_time(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) return std::stoll(text);
  int y, mo, d, h, mi;
  double sec;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%lf%n", &y, &mo, &d, &h, &mi, &sec, &consumed) != 6) {
    return std::nullopt;
  }
  std::string zone = text.substr(consumed);
  int offset_s = 0;
  if (zone == "Z" || zone == "z") {
    offset_s = 0;
  } else {
    int oh, om;
    char sign;
    if (std::sscanf(zone.c_str(), "%c%2d:%2d", &sign, &oh, &om) != 3 || (sign != '+' && sign != '-') ||
        zone.size() != 6) {
      return std::nullopt;
    }
    offset_s = (sign == '-' ? -1 : 1) * (oh * 3600 + om * 60);
  }
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = 0;
  const int64_t base = static_cast<int64_t>(timegm(&tm)) - offset_s;
  return base * 1000 + static_cast<int64_t>(std::llround(sec * 1000));
}

void print_budget_line(int remaining, const std::string& day, const std::string& resets_at) {
  std::cout << "remaining today: " << remaining;
  if (!day.empty()) std::cout << " (budget day " << day << ")";
  if (!resets_at.empty()) std::cout << ", resets at " << resets_at;
  std::cout << "\n";
}

// ---- plan ----

struct PlanOptions {
  std::string job;
  int k = 0;
  double sigma = 0;
  bool json = false;
};

int run_plan(Client& client, const PlanOptions& o) {
  if (o.k < 0) return fail(kExitUsage, "-k: must be >= 0 (0: all that remain today)");
  if (o.sigma < 0) return fail(kExitUsage, "--sigma: must be >= 0 (0: the default or the learned value)");
  v1::PlanSubmissionsRequest req;
  req.set_job_id(o.job);
  req.set_k(o.k);
  req.set_accuracy_sigma(o.sigma);
  v1::PlanSubmissionsResponse resp;
  auto ctx = client.context();
  grpc::Status s = client.stub().PlanSubmissions(ctx.get(), req, &resp);
  if (!s.ok()) return report(s, client);

  if (o.json) {
    Json picks = Json::array();
    for (const auto& p : resp.picks()) picks.push_back(to_json(p));
    Json out;
    out["job_id"] = o.job;
    out["picks"] = picks;
    out["expected_best_score"] = resp.expected_best_score();
    out["remaining_today"] = resp.remaining_today();
    out["budget_day"] = resp.budget_day();
    out["resets_at"] = resp.resets_at();
    out["calibration"] = resp.calibration();
    print_json(out);
    return kExitOk;
  }

  if (resp.picks_size() == 0) {
    std::cout << "no picks for today\n";
  } else {
    v1::Job job;
    const bool have_job = fetch_job(client, o.job, &job).ok();
    const std::vector<double> levels = gate_levels(have_job ? &job : nullptr);
    size_t n_gates = 0;
    for (const auto& p : resp.picks()) n_gates = std::max(n_gates, static_cast<size_t>(p.p_gate_size()));
    const std::vector<std::string> labels = gate_labels(levels, n_gates);
    const auto reference = reference_params(client, o.job);

    Table table;
    table.add_column("pick", Table::kRight);
    table.add_column("trial", Table::kRight);
    table.add_column("role");
    table.add_column("predicted", Table::kRight);
    table.add_column("10%..90%", Table::kRight);
    for (const auto& l : labels) table.add_column(l, Table::kRight);
    table.add_column("marginal", Table::kRight);
    table.add_column("params");
    int i = 0;
    for (const auto& p : resp.picks()) {
      std::vector<std::string> row = {std::to_string(++i), std::to_string(p.trial()), p.role(),
                                      fmt_score(p.predicted_score()),
                                      fmt_score(p.score_lo()) + ".." + fmt_score(p.score_hi())};
      for (size_t g = 0; g < n_gates; ++g) {
        row.push_back(static_cast<int>(g) < p.p_gate_size() ? fmt_percent(p.p_gate(static_cast<int>(g))) : "-");
      }
      row.push_back("+" + fmt_score(p.marginal_value()));
      row.push_back(truncate(reference.empty() ? params_brief(p.params()) : params_vs(p.params(), reference), 60));
      table.add_row(std::move(row));
    }
    table.print(std::cout);
    std::cout << "\n";
    i = 0;
    for (const auto& p : resp.picks()) {
      ++i;
      if (p.accuracy_proxy())
        std::cout << "pick " << i << ": accuracy is proxy (measured on the job's accuracy.model), and so is P(C)\n";
      if (p.explanation().empty()) continue;
      // The planner's explanations usually name the trial and role themselves.
      if (p.explanation().rfind("trial ", 0) == 0) {
        std::cout << "pick " << i << ": " << p.explanation() << "\n";
      } else {
        std::cout << "pick " << i << " (trial " << p.trial() << ", " << p.role() << "): " << p.explanation() << "\n";
      }
    }
  }
  std::cout << "expected best of the day: " << fmt_score(resp.expected_best_score()) << "\n";
  print_budget_line(resp.remaining_today(), resp.budget_day(), resp.resets_at());
  if (!resp.calibration().empty()) std::cout << "calibration: " << resp.calibration() << "\n";
  return kExitOk;
}

// ---- record ----

struct RecordOptions {
  std::string job;
  int64_t trial = 0;
  double s1 = 0, s8 = 0, sinf = 0, accuracy = 0, c = 0, final_score = 0;
  std::string note;
  std::string at;
  bool json = false;
  bool c_given = false, final_given = false;
};

bool fetch_submissions(Client& client, const std::string& job, v1::ListSubmissionsResponse* resp) {
  v1::ListSubmissionsRequest req;
  req.set_job_id(job);
  auto ctx = client.context();
  return client.stub().ListSubmissions(ctx.get(), req, resp).ok();
}

int run_record(Client& client, const RecordOptions& o) {
  v1::RecordSubmissionRequest req;
  req.set_job_id(o.job);
  req.set_trial(o.trial);
  req.set_note(o.note);
  auto* r = req.mutable_result();
  r->set_s1(o.s1);
  r->set_s8(o.s8);
  r->set_sinf(o.sinf);
  r->set_relative_accuracy(o.accuracy);
  // Without --c / --final they are sent as 0: the daemon computes them from the official S values and accuracy
  // with the job's scoring, so the stored result is complete.
  r->set_c(o.c_given ? o.c : 0);
  r->set_final_score(o.final_given ? o.final_score : 0);
  if (!o.at.empty()) {
    auto ms = parse_time(o.at);
    if (!ms) {
      return fail(kExitUsage, "--at: '" + o.at + "' is neither unix milliseconds nor RFC 3339 "
                              "(e.g. 2026-12-02T16:15:30+08:00)");
    }
    req.set_submitted_unix_ms(*ms);
  }
  v1::Submission sub;
  auto ctx = client.context();
  grpc::Status s = client.stub().RecordSubmission(ctx.get(), req, &sub);
  if (!s.ok()) {
    const int code = report(s, client);
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && s.error_message().find("resets") == std::string::npos) {
      v1::ListSubmissionsResponse budget;
      if (fetch_submissions(client, "", &budget) && !budget.resets_at().empty()) {
        std::cerr << "the daily budget resets at " << budget.resets_at() << "\n";
      }
    }
    return code;
  }
  if (o.json) {
    print_json(to_json(sub));
    return kExitOk;
  }
  std::cout << "recorded submission " << sub.id() << ": trial " << sub.trial() << " of job " << sub.job_id()
            << " on budget day " << sub.budget_day() << ": final " << fmt_score(sub.result().final_score())
            << " (C = " << fmt_gate(sub.result().c()) << ")\n";
  v1::ListSubmissionsResponse budget;
  if (fetch_submissions(client, "", &budget)) {
    print_budget_line(budget.remaining_today(), budget.budget_day(), budget.resets_at());
  }
  return kExitOk;
}

// ---- submissions ----

struct SubmissionsOptions {
  std::string job;
  bool json = false;
};

int run_submissions(Client& client, const SubmissionsOptions& o) {
  // Every page; the budget fields are the same on each, the last page's are kept.
  v1::ListSubmissionsResponse resp;
  google::protobuf::RepeatedPtrField<v1::Submission> all;
  std::string token;
  do {
    v1::ListSubmissionsRequest req;
    req.set_job_id(o.job);
    req.set_page_size(1000);
    req.set_page_token(token);
    auto ctx = client.context();
    grpc::Status s = client.stub().ListSubmissions(ctx.get(), req, &resp);
    if (!s.ok()) return report(s, client);
    for (auto& sub : *resp.mutable_submissions()) *all.Add() = std::move(sub);
    token = resp.next_page_token();
  } while (!token.empty());
  resp.mutable_submissions()->Swap(&all);
  if (o.json) {
    Json arr = Json::array();
    for (const auto& sub : resp.submissions()) arr.push_back(to_json(sub));
    Json out;
    out["submissions"] = arr;
    out["remaining_today"] = resp.remaining_today();
    out["budget_day"] = resp.budget_day();
    out["resets_at"] = resp.resets_at();
    print_json(out);
    return kExitOk;
  }
  if (resp.submissions_size() == 0) {
    std::cout << "no submissions" << (o.job.empty() ? "" : " for job " + o.job) << "\n";
  } else {
    Table t;
    t.add_column("id", Table::kRight);
    if (o.job.empty()) t.add_column("job");
    t.add_column("trial", Table::kRight);
    t.add_column("submitted");
    t.add_column("day");
    t.add_column("S1", Table::kRight);
    t.add_column("S8", Table::kRight);
    t.add_column("Sinf", Table::kRight);
    t.add_column("acc", Table::kRight);
    t.add_column("C", Table::kRight);
    t.add_column("final", Table::kRight);
    t.add_column("note");
    for (const auto& sub : resp.submissions()) {
      std::vector<std::string> row = {std::to_string(sub.id())};
      if (o.job.empty()) row.push_back(sub.job_id());
      const auto& r = sub.result();
      for (std::string cell : {std::to_string(sub.trial()), fmt_time(sub.submitted_unix_ms()), sub.budget_day(),
                               fmt_score(r.s1()), fmt_score(r.s8()), fmt_score(r.sinf()),
                               fmt_accuracy(r.relative_accuracy()), fmt_gate(r.c()), fmt_score(r.final_score()),
                               truncate(sub.note(), 40)}) {
        row.push_back(std::move(cell));
      }
      t.add_row(std::move(row));
    }
    t.print(std::cout);
  }
  print_budget_line(resp.remaining_today(), resp.budget_day(), resp.resets_at());
  return kExitOk;
}

}  // namespace

void add_submission_commands(CLI::App& app, Context& ctx) {
  {
    auto o = std::make_shared<PlanOptions>();
    auto* sub = app.add_subcommand("plan", "Which configs to spend today's official submissions on");
    sub->add_option("job", o->job, "job id")->required();
    sub->add_option("-k", o->k, "number of picks (0: all that remain today)")->capture_default_str();
    sub->add_option("--sigma", o->sigma, "official accuracy noise, points (0: default 2 or learned)");
    sub->add_flag("--json", o->json, "machine-readable output");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_plan(c, *o); }; });
  }
  {
    auto o = std::make_shared<RecordOptions>();
    auto* sub = app.add_subcommand("record", "Record the official result of a submission");
    sub->add_option("job", o->job, "job id")->required();
    sub->add_option("trial", o->trial, "the trial that was submitted")->required();
    sub->add_option("--s1", o->s1, "official S1")->required();
    sub->add_option("--s8", o->s8, "official S8")->required();
    sub->add_option("--sinf", o->sinf, "official Sinf")->required();
    sub->add_option("--accuracy", o->accuracy, "official relative accuracy, percent")->required();
    auto* c_opt = sub->add_option("--c", o->c, "official gate C (default: from --accuracy and the job's gate)");
    auto* final_opt = sub->add_option(
        "--final", o->final_score, "official final score (default: the job's weights over S1/S8/Sinf, times C)");
    sub->add_option("--note", o->note, "free text");
    sub->add_option("--at", o->at, "submission time: unix ms or RFC 3339 (default: now)");
    sub->add_flag("--json", o->json, "print the stored submission as JSON");
    sub->callback([&ctx, o, c_opt, final_opt] {
      o->c_given = c_opt->count() > 0;
      o->final_given = final_opt->count() > 0;
      ctx.action = [o](Client& c) { return run_record(c, *o); };
    });
  }
  {
    auto o = std::make_shared<SubmissionsOptions>();
    auto* sub = app.add_subcommand("submissions", "Recorded submissions (of one job, or all) and today's budget");
    sub->add_option("job", o->job, "job id (default: all jobs)");
    sub->add_flag("--json", o->json, "machine-readable output");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_submissions(c, *o); }; });
  }
}

}  // namespace soartune::cli
