// trials, show, best, export.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "daemon/cli/commands.h"
#include "daemon/cli/format.h"
#include "daemon/cli/json_out.h"

namespace soartune::cli {

namespace {

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// ---- trials ----

struct TrialsOptions {
  std::string job;
  std::string sort = "number";
  bool desc = false;
  std::string status;
  int limit = 0;
  bool json = false;
};

int run_trials(Client& client, const TrialsOptions& o) {
  std::string key = lower(o.sort);
  bool desc = o.desc;
  if (!key.empty() && key[0] == '-') {
    desc = true;
    key.erase(0, 1);
  }
  static const std::vector<std::string> kKeys = {"number", "score", "c1", "c8", "cinf", "accuracy"};
  if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
    return fail(kExitUsage, "--sort: '" + o.sort + "' is not one of number, score, c1, c8, cinf, accuracy "
                            "(prefix '-' or add --desc for descending)");
  }
  v1::TrialStatus status = v1::TRIAL_STATUS_UNSPECIFIED;
  if (!o.status.empty()) {
    const std::string s = lower(o.status);
    if (s == "complete") status = v1::TRIAL_COMPLETE;
    else if (s == "failed") status = v1::TRIAL_FAILED;
    else if (s == "running") status = v1::TRIAL_RUNNING;
    else if (s == "cancelled") status = v1::TRIAL_CANCELLED;
    else if (s == "pruned") status = v1::TRIAL_PRUNED;
    else return fail(kExitUsage, "--status: '" + o.status + "' is not one of complete, failed, running, cancelled, pruned");
  }
  if (o.limit < 0) return fail(kExitUsage, "--limit: must be >= 0 (0: all)");

  std::vector<v1::Trial> trials;
  int total = 0;
  std::string token;
  do {
    v1::ListTrialsRequest req;
    req.set_job_id(o.job);
    req.set_status(status);
    req.set_order_by((desc ? "-" : "") + key);
    req.set_page_size(o.limit > 0 ? std::min(1000, o.limit - static_cast<int>(trials.size())) : 1000);
    req.set_page_token(token);
    v1::ListTrialsResponse resp;
    auto ctx = client.context();
    grpc::Status s = client.stub().ListTrials(ctx.get(), req, &resp);
    if (!s.ok()) return report(s, client);
    for (const auto& t : resp.trials()) trials.push_back(t);
    total = resp.total();
    token = resp.next_page_token();
  } while (!token.empty() && (o.limit <= 0 || static_cast<int>(trials.size()) < o.limit));
  if (o.limit > 0 && static_cast<int>(trials.size()) > o.limit) trials.resize(o.limit);

  if (o.json) {
    Json arr = Json::array();
    for (const auto& t : trials) arr.push_back(to_json(t));
    print_json(Json{{"job_id", o.job}, {"total", total}, {"trials", arr}});
    return kExitOk;
  }
  if (trials.empty()) {
    std::cout << "no trials" << (o.status.empty() ? "" : " with status " + lower(o.status)) << "\n";
    return kExitOk;
  }

  std::vector<const v1::Trial*> ptrs;
  std::vector<const google::protobuf::Map<std::string, std::string>*> param_sets;
  for (const auto& t : trials) {
    ptrs.push_back(&t);
    param_sets.push_back(&t.params());
  }
  // Key params: the knobs the job's space varies (in spec order), then any other that differs between the
  // listed trials (e.g. fixed knobs changed by a warm start or a user trial).
  v1::Job job;
  std::vector<std::string> knobs;
  if (fetch_job(client, o.job, &job).ok()) knobs = space_params(job.spec_yaml());
  if (knobs.empty() || trials.size() > 1) {
    for (const std::string& k : varying_params(param_sets)) {
      if (std::find(knobs.begin(), knobs.end(), k) == knobs.end()) knobs.push_back(k);
    }
  }
  const std::vector<std::string> tiers = tier_names(ptrs);
  const bool any_error =
      std::any_of(trials.begin(), trials.end(), [](const v1::Trial& t) { return !t.error().empty(); });
  // A multi-fidelity job's screening runs: their fidelity shown, since their seconds and score are of a
  // shortened workload (a daemon from before fidelities sends 0: every trial a full run).
  auto fidelity_of = [](const v1::Trial& t) { return t.fidelity() > 0 ? t.fidelity() : 1.0; };
  const bool any_screening =
      std::any_of(trials.begin(), trials.end(), [&](const v1::Trial& t) { return fidelity_of(t) < 1.0; });

  Table table;
  table.add_column("#", Table::kRight);
  table.add_column("status");
  if (any_screening) table.add_column("fidelity", Table::kRight);
  for (const auto& k : knobs) table.add_column(knob_header(k), Table::kRight);
  for (const auto& tier : tiers) table.add_column(tier + " s", Table::kRight);
  table.add_column("acc", Table::kRight);
  table.add_column("C", Table::kRight);
  table.add_column("score", Table::kRight);
  if (any_error) table.add_column("error");
  for (const auto& t : trials) {
    const bool complete = t.status() == v1::TRIAL_COMPLETE;
    std::vector<std::string> row = {std::to_string(t.number()), status_name(t.status())};
    if (any_screening) {
      char f[32];
      std::snprintf(f, sizeof f, "%.3g", fidelity_of(t));
      row.push_back(f);
    }
    for (const auto& k : knobs) {
      auto it = t.params().find(k);
      row.push_back(it == t.params().end() ? "-" : it->second);
    }
    for (const auto& tier : tiers) row.push_back(fmt_duration(tier_duration(t, tier)));
    // A PRUNED trial measured its accuracy before it was stopped.
    const bool measured = complete || t.status() == v1::TRIAL_PRUNED;
    row.push_back(measured ? fmt_accuracy(t.relative_accuracy()) + (t.accuracy_proxy() ? " proxy" : "") : "-");
    row.push_back(complete ? fmt_gate(t.gate()) : "-");
    row.push_back(complete ? fmt_score(t.score()) : "-");
    if (any_error) row.push_back(truncate(t.error(), 48));
    table.add_row(std::move(row));
  }
  table.print(std::cout);
  if (static_cast<int>(trials.size()) < total) {
    std::cout << "(" << trials.size() << " of " << total << " trials)\n";
  }
  return kExitOk;
}

// ---- show / best ----

struct ShowOptions {
  std::string job;
  int64_t trial = 0;
  bool json = false;
};

void print_trial(const v1::Trial& t, const v1::Job* job) {
  const std::vector<double> levels = gate_levels(job);
  auto key = [](const std::string& k) { return "  " + k + std::string(k.size() < 14 ? 14 - k.size() : 1, ' '); };

  std::cout << "trial " << t.number() << " of job " << t.job_id() << ": " << status_name(t.status())
            << (t.is_reference() ? " (the reference config)" : "") << "\n";
  if (t.fidelity() > 0 && t.fidelity() < 1.0) {
    char f[200];
    std::snprintf(f, sizeof f, "%.3g: a screening run of a shortened workload (its score is relative to the same "
                  "level's runs, never ranked with full runs)", t.fidelity());
    std::cout << key("fidelity") << f << "\n";
  }
  if (t.has_early_stop()) {
    char why[240];
    std::snprintf(why, sizeof why, "after %s: best reachable score %s < incumbent %s - %.0f%% (the job's early_stop rule)",
                  t.early_stop().stage().c_str(), fmt_score(t.early_stop().bound()).c_str(),
                  fmt_score(t.early_stop().incumbent()).c_str(), 100 * t.early_stop().margin());
    std::cout << key("stopped") << why << "\n";
    std::cout << key("accuracy") << fmt_accuracy(t.relative_accuracy())
              << (t.accuracy_metric().empty() ? "" : " (" + t.accuracy_metric() + ")") << "\n";
  }
  if (t.status() == v1::TRIAL_COMPLETE) {
    std::cout << key("score") << fmt_score(t.score()) << "  (C = " << fmt_gate(t.gate()) << ")\n";
    std::cout << key("accuracy") << fmt_accuracy(t.relative_accuracy())
              << (t.accuracy_metric().empty() ? "" : " (" + t.accuracy_metric() + ")")
              << (t.accuracy_proxy() ? " proxy: measured on the job's accuracy.model, not on the timed model" : "")
              << "\n";
  }
  if (!t.error().empty() && !t.has_early_stop()) {   // a stopped trial's reason is the line above
    std::istringstream lines(t.error());
    bool first = true;
    for (std::string line; std::getline(lines, line); first = false) {
      std::cout << (first ? key("error") : std::string(16, ' ')) << line << "\n";
    }
  }
  if (t.failure_kind() != v1::FAILURE_KIND_UNSPECIFIED) {
    std::cout << key("failure") << failure_name(t.failure_kind());
    if (t.failure_kind() == v1::FAILURE_CRASH || t.failure_kind() == v1::FAILURE_EXIT_CODE)
      std::cout << " (" << (t.failure_kind() == v1::FAILURE_CRASH ? "signal " : "exit status ") << t.failure_code() << ")";
    std::cout << "\n";
  }

  std::cout << "params\n";
  std::map<std::string, std::string> params(t.params().begin(), t.params().end());
  size_t width = 0;
  for (const auto& [k, v] : params) width = std::max(width, k.size());
  for (const auto& [k, v] : params) std::cout << "  " << k << std::string(width - k.size() + 2, ' ') << v << "\n";

  if (t.tiers_size() > 0) {
    std::cout << "tiers\n";
    Table table;
    table.add_column("  tier");
    table.add_column("conc", Table::kRight);
    table.add_column("duration s", Table::kRight);
    table.add_column("ttft p50/p90/p99 ms", Table::kRight);
    table.add_column("tpot p50/p90/p99 ms", Table::kRight);
    table.add_column("tok/s", Table::kRight);
    auto ms3 = [](double a, double b, double c) {
      return fmt_duration(a) + " / " + fmt_duration(b) + " / " + fmt_duration(c);
    };
    for (const auto& m : t.tiers()) {
      table.add_row({"  " + m.tier(), m.concurrency() == 0 ? "inf" : std::to_string(m.concurrency()),
                     fmt_duration(m.duration_s()), ms3(m.ttft_p50_ms(), m.ttft_p90_ms(), m.ttft_p99_ms()),
                     ms3(m.tpot_p50_ms(), m.tpot_p90_ms(), m.tpot_p99_ms()), fmt_duration(m.output_tokens_per_s())});
    }
    table.print(std::cout);
  }

  if (t.plans_size() > 0) {
    std::cout << "kernel plans\n";
    Table table;
    table.add_column("  op");
    table.add_column("shape");
    table.add_column("choice");
    for (const auto& p : t.plans()) table.add_row({"  " + p.op(), p.shape(), params_brief(p.choice())});
    table.print(std::cout);
  }
  if (t.env_size() > 0) {
    std::cout << "environment\n";
    std::map<std::string, std::string> env(t.env().begin(), t.env().end());
    for (const auto& [k, v] : env) std::cout << "  " << k << "=" << v << "\n";
  }

  if (t.has_suggestion()) {
    const auto& s = t.suggestion();
    std::cout << "why chosen\n";
    std::cout << key("strategy") << (s.strategy().empty() ? "-" : s.strategy()) << "\n";
    const bool modelled = s.predicted_score() != 0 || s.predicted_score_std() != 0 || s.p_gate_size() > 0;
    if (modelled) {
      std::cout << key("predicted") << fmt_score(s.predicted_score()) << " ± " << fmt_score(s.predicted_score_std())
                << "\n";
      std::cout << key("EI") << fmt_score(s.expected_improvement()) << "\n";
      std::cout << key("P(failure)") << fmt_percent(s.p_failure()) << "\n";
      if (s.p_gate_size() > 0) {
        const auto labels = gate_labels(levels, static_cast<size_t>(s.p_gate_size()));
        std::string gates;
        for (int i = 0; i < s.p_gate_size(); ++i) {
          if (i) gates += "  ";
          gates += labels[i] + " " + fmt_percent(s.p_gate(i));
        }
        std::cout << key("gate tiers") << gates << "\n";
      }
    }
    if (!s.note().empty()) std::cout << key("note") << s.note() << "\n";
  }

  std::cout << "run\n";
  std::cout << key("started") << fmt_time(t.started_unix_ms()) << "\n";
  if (t.finished_unix_ms() > 0) {
    std::cout << key("finished") << fmt_time(t.finished_unix_ms());
    if (t.started_unix_ms() > 0) {
      std::cout << " (took " << fmt_duration((t.finished_unix_ms() - t.started_unix_ms()) / 1000.0) << " s)";
    }
    std::cout << "\n";
  }
  if (const std::string took = fmt_trial_timings(t.timings()); !took.empty())
    std::cout << key("time") << took << "\n";
  if (!t.device().empty()) std::cout << key("device") << t.device() << "\n";
  if (!t.engine_build().empty()) std::cout << key("engine build") << t.engine_build() << "\n";
  if (t.peak_memory_bytes() > 0) std::cout << key("peak memory") << fmt_bytes(t.peak_memory_bytes()) << "\n";

  const bool show_log = t.status() != v1::TRIAL_COMPLETE && !t.log_tail().empty();
  if (show_log) {
    std::cout << "log tail\n";
    std::istringstream lines(t.log_tail());
    for (std::string line; std::getline(lines, line);) std::cout << "  | " << line << "\n";
  }
}

int show(Client& client, const v1::Trial& t, const std::string& job_id, bool json) {
  if (json) {
    print_json(to_json(t, /*full=*/true));
    return kExitOk;
  }
  v1::Job job;
  const bool have_job = fetch_job(client, job_id, &job).ok();
  print_trial(t, have_job ? &job : nullptr);
  return kExitOk;
}

int run_show(Client& client, const ShowOptions& o) {
  v1::GetTrialRequest req;
  req.set_job_id(o.job);
  req.set_number(o.trial);
  v1::Trial t;
  auto ctx = client.context();
  grpc::Status s = client.stub().GetTrial(ctx.get(), req, &t);
  if (!s.ok()) return report(s, client);
  return show(client, t, o.job, o.json);
}

int run_best(Client& client, const ShowOptions& o) {
  v1::GetBestRequest req;
  req.set_job_id(o.job);
  v1::Trial t;
  auto ctx = client.context();
  grpc::Status s = client.stub().GetBest(ctx.get(), req, &t);
  if (!s.ok()) return report(s, client);
  return show(client, t, o.job, o.json);
}

// ---- export ----

struct ExportOptions {
  std::string job;
  int64_t trial = -1;
  std::string format = "yaml";
  std::string output;
};

// Writes the bundle's files into the directory the user named (the client's side: the daemon only ever writes
// under its own work dir). Files too large for the reply are copied from the daemon's bundle directory, which
// works where the CLI runs on the daemon's host.
int write_bundle(const v1::ExportConfigResponse& resp, const ExportOptions& o) {
  namespace fs = std::filesystem;
  const fs::path dir(o.output);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(kExitError, "cannot create " + o.output + ": " + ec.message());
  for (const v1::BundleFile& f : resp.files()) {
    const fs::path rel(f.path());
    bool safe = !rel.empty() && rel.is_relative();
    for (const fs::path& part : rel) safe = safe && part != "..";
    if (!safe) return fail(kExitError, "bundle file " + f.path() + ": not a relative path inside the bundle");
    const fs::path dst = dir / rel;
    fs::create_directories(dst.parent_path(), ec);
    if (f.content_included()) {
      std::ofstream out(dst, std::ios::binary | std::ios::trunc);
      out << f.content();
      out.close();
      if (!out) return fail(kExitError, "cannot write " + dst.string());
    } else {
      const fs::path src = fs::path(resp.bundle_dir()) / rel;
      fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
      if (ec)
        return fail(kExitError, "bundle file " + f.path() + " (" + std::to_string(f.size_bytes()) +
                                    " bytes) is too large for the reply and " + src.string() +
                                    " cannot be read here (" + ec.message() + "); copy it from the daemon's host");
    }
    if (f.path() == "prepare_env.sh")
      fs::permissions(dst, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                      fs::perm_options::add, ec);
  }
  std::cerr << "wrote " << o.output << ": trial " << resp.trial() << " of job " << o.job << " as sglang-bundle ("
            << resp.files_size() << " files; the daemon's copy: " << resp.bundle_dir() << ")\n";
  return kExitOk;
}

int run_export(Client& client, const ExportOptions& o) {
  v1::ExportConfigRequest req;
  req.set_job_id(o.job);
  req.set_trial(o.trial);
  req.set_format(o.format);
  if (o.format == "sglang-bundle" && (o.output.empty() || o.output == "-"))
    return fail(kExitUsage, "--output: sglang-bundle writes a directory; give -o DIR");
  v1::ExportConfigResponse resp;
  auto ctx = client.context();
  grpc::Status s = client.stub().ExportConfig(ctx.get(), req, &resp);
  if (!s.ok()) return report(s, client);
  if (o.format == "sglang-bundle") return write_bundle(resp, o);
  if (o.output.empty() || o.output == "-") {
    std::cout << resp.text();
    if (!resp.text().empty() && resp.text().back() != '\n') std::cout << "\n";
    return kExitOk;
  }
  std::ofstream out(o.output, std::ios::binary | std::ios::trunc);
  out << resp.text();
  if (!resp.text().empty() && resp.text().back() != '\n') out << "\n";
  out.close();
  if (!out) return fail(kExitError, "cannot write " + o.output);
  std::cerr << "wrote " << o.output << ": trial " << resp.trial() << " of job " << o.job << " as "
            << (resp.format().empty() ? o.format : resp.format()) << "\n";
  return kExitOk;
}

}  // namespace

void add_trial_commands(CLI::App& app, Context& ctx) {
  {
    auto o = std::make_shared<TrialsOptions>();
    auto* sub = app.add_subcommand("trials", "List a job's trials: params that vary, tier durations, accuracy, score");
    sub->add_option("job", o->job, "job id")->required();
    sub->add_option("--sort,-s", o->sort,
                    "number | score | c1 | c8 | cinf | accuracy; prefix '-' for descending (--sort=-score)")
        ->capture_default_str();
    sub->add_flag("--desc", o->desc, "descending order");
    sub->add_option("--status", o->status, "complete | failed | running | cancelled | pruned");
    sub->add_option("--limit,-n", o->limit, "at most N trials (0: all)")->capture_default_str();
    sub->add_flag("--json", o->json, "machine-readable output");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_trials(c, *o); }; });
  }
  {
    auto o = std::make_shared<ShowOptions>();
    auto* sub = app.add_subcommand("show", "Everything about one trial, including why the search chose it");
    sub->add_option("job", o->job, "job id")->required();
    sub->add_option("trial", o->trial, "trial number (0 is the reference)")->required();
    sub->add_flag("--json", o->json, "machine-readable output");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_show(c, *o); }; });
  }
  {
    auto o = std::make_shared<ShowOptions>();
    auto* sub = app.add_subcommand("best", "The job's best trial so far (highest gated score)");
    sub->add_option("job", o->job, "job id")->required();
    sub->add_flag("--json", o->json, "machine-readable output");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_best(c, *o); }; });
  }
  {
    auto o = std::make_shared<ExportOptions>();
    auto* sub = app.add_subcommand("export", "Export a trial's launch config (the best by default)");
    sub->add_option("job", o->job, "job id")->required();
    sub->add_option("--trial,-t", o->trial, "trial number (-1: the best)")->capture_default_str();
    sub->add_option("--format,-f", o->format,
                    "yaml (re-runnable trial file) | sglang-args | env-script | sglang-bundle (a submission "
                    "directory: prepare_env.sh, README.md, the quantised checkpoint; needs -o DIR)")
        ->check(CLI::IsMember({"yaml", "sglang-args", "env-script", "sglang-bundle"}))
        ->capture_default_str();
    sub->add_option("--output,-o", o->output, "write to FILE instead of stdout (sglang-bundle: the directory)");
    sub->callback([&ctx, o] { ctx.action = [o](Client& c) { return run_export(c, *o); }; });
  }
}

}  // namespace soartune::cli
