// Early stop through the real soartuned, soartune-worker processes and the CLI on the synthetic tiny model. The
// gate is set above what a 4-bit config reaches, so with `early_stop: {after_tiers: 0}` the rule must fire right
// after the accuracy pass, whatever the timings: the trial ends PRUNED with its stage and the rule's numbers, its
// worker is gone, no tier ran, the job still finishes, and the CLI shows it. The same job without `early_stop:`
// runs every trial to the end.
#include <dirent.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon_process.h"

namespace soartune::daemon {
namespace {

using nlohmann::json;
using testing::Daemon;
using testing::TempDir;

// 8 requests of 64 tokens at concurrency 1 make c1 a long tier (0.3 s of CPU, 2 s on a loaded 2-core machine),
// so a stop after the accuracy lands well before any tier ends. The reference scores 100% against itself; every 4-bit config is under the 99.9% gate.
const char* kJob = R"(name: es
model: synthetic:tiny
backend: cpu
seed: 7
strategy: random
budget: {trials: 3}
trial_timeout_s: 120
workload: {name: es, requests: [{name: a, input_len: 16, output_len: 64, count: 8}]}
accuracy: {set: synthetic, samples: 4, prompt_len: 16, continuation_len: 16}
scoring: {gate: [{above: 99.9, c: 1.0}]}
space:
  weight_bits: {type: choice, values: [4]}
  weight_group_size: {type: choice, values: [32, 64]}
)";

json cli_json(Daemon& d, std::vector<std::string> args) {
  ProcessResult r = d.cli(std::move(args));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err_tail;
  return json::parse(r.out, nullptr, false);
}

// Processes whose command line names `needle` (a trial file): a worker still alive.
int processes_naming(const std::string& needle) {
  int n = 0;
  DIR* proc = ::opendir("/proc");
  if (!proc) return -1;
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmd.find(needle) != std::string::npos) ++n;
  }
  ::closedir(proc);
  return n;
}

std::string submit(Daemon& d, const TempDir& dir, const std::string& name, const std::string& text, std::string* out) {
  const std::string spec = testing::write_file(dir.file(name), text);
  ProcessResult sub = d.cli({"submit", spec, "--watch", "--plain"});
  EXPECT_EQ(sub.exit_code, 0) << sub.out << sub.err_tail << d.log();
  *out = sub.out;
  return sub.out.substr(0, sub.out.find_first_of(" \n"));
}

TEST(EarlyStopJob, AHopelessTrialIsPrunedAndTheJobFinishes) {
  TempDir dir;
  Daemon d(dir, {"--data-root", dir.path()});
  ASSERT_TRUE(d.start()) << d.log();
  std::string watched;
  const std::string id =
      submit(d, dir, "pruning.yaml", std::string(kJob) + "early_stop: {after_tiers: 0, margin_pct: 5}\n", &watched);
  ASSERT_FALSE(id.empty());

  const json job = cli_json(d, {"status", id, "--json"});
  EXPECT_EQ(job["state"], "SUCCEEDED") << job.dump();
  const json trials = cli_json(d, {"trials", id, "--json", "--limit", "0"})["trials"];
  ASSERT_TRUE(trials.is_array());
  ASSERT_EQ(trials.size(), 3u) << "pruned trials count against the budget and the job runs on: " << trials.dump();
  EXPECT_EQ(trials[0]["status"], "COMPLETE");
  EXPECT_TRUE(trials[0]["is_reference"].get<bool>());
  for (size_t i = 1; i < trials.size(); ++i) {
    const json& t = trials[i];
    ASSERT_EQ(t["status"], "PRUNED") << t.dump();
    // The stage and the rule's numbers, as values.
    ASSERT_TRUE(t.contains("early_stop")) << t.dump();
    EXPECT_EQ(t["early_stop"]["stage"], "accuracy");
    EXPECT_EQ(t["early_stop"]["bound"], 0.0);   // C = 0: no speed can help
    EXPECT_DOUBLE_EQ(t["early_stop"]["incumbent"].get<double>(), trials[0]["score"].get<double>());
    EXPECT_DOUBLE_EQ(t["early_stop"]["margin"].get<double>(), 0.05);
    EXPECT_FALSE(t.contains("failure_kind")) << "a pruned trial did not fail";
    // What it had measured: its accuracy, under the gate; no tier.
    EXPECT_LT(t["relative_accuracy"].get<double>(), 99.9);
    EXPECT_TRUE(t["tiers"].empty()) << t["tiers"].dump();
    // Its worker is gone, and it never got to the end of a tier (the worker logs each tier as it ends).
    char name[32];
    std::snprintf(name, sizeof name, "trial-%04d.yaml", t["number"].get<int>());
    const std::string trial_file = (std::filesystem::path(dir.file("work")) / id / name).string();
    EXPECT_EQ(processes_naming(trial_file), 0);
    const json shown = cli_json(d, {"show", id, std::to_string(t["number"].get<int>()), "--json"});
    const std::string log = shown["log_tail"].get<std::string>();
    EXPECT_NE(log.find("accuracy"), std::string::npos) << log;
    EXPECT_EQ(log.find("tier c1:"), std::string::npos) << log;
  }
  // The CLI shows it: the watch stream, the status filter, the table, one trial, the job's counts.
  EXPECT_NE(watched.find("trial 1 PRUNED: stopped early after accuracy"), std::string::npos) << watched;
  EXPECT_EQ(cli_json(d, {"trials", id, "--json", "--status", "pruned"})["trials"].size(), 2u);
  ProcessResult table = d.cli({"trials", id});
  EXPECT_NE(table.out.find("PRUNED"), std::string::npos) << table.out;
  ProcessResult show = d.cli({"show", id, "1"});
  EXPECT_NE(show.out.find("stopped"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("after accuracy: best reachable score"), std::string::npos) << show.out;
  EXPECT_EQ(job["trials_pruned"], 2);
  EXPECT_EQ(job["trials_done"], 1);
  // best and export are the reference: a pruned trial is never ranked or exported.
  EXPECT_EQ(cli_json(d, {"best", id, "--json"})["number"], 0);
  EXPECT_NE(d.cli({"export", id, "--trial", "1"}).exit_code, 0);
}

TEST(EarlyStopJob, AfterTheFirstTierTheTrialKeepsWhatItMeasured) {
  TempDir dir;
  Daemon d(dir, {"--data-root", dir.path()});
  ASSERT_TRUE(d.start()) << d.log();
  std::string job = std::string(kJob) + "early_stop: {after_tiers: 1}\n";   // the measured rule's margin: 5%
  job.replace(job.find("trials: 3"), 9, "trials: 2");
  std::string watched;
  const std::string id = submit(d, dir, "after-c1.yaml", job, &watched);
  const json trials = cli_json(d, {"trials", id, "--json", "--limit", "0"})["trials"];
  ASSERT_EQ(trials.size(), 2u) << trials.dump();
  const json& t = trials[1];
  ASSERT_EQ(t["status"], "PRUNED") << t.dump();
  EXPECT_EQ(t["early_stop"]["stage"], "c1");
  EXPECT_DOUBLE_EQ(t["early_stop"]["margin"].get<double>(), 0.05);
  // Its accuracy and its c1, as the worker reported them when the rule decided; nothing after.
  ASSERT_EQ(t["tiers"].size(), 1u) << t["tiers"].dump();
  EXPECT_EQ(t["tiers"][0]["tier"], "c1");
  EXPECT_GT(t["tiers"][0]["duration_s"].get<double>(), 0);
  EXPECT_LT(t["relative_accuracy"].get<double>(), 99.9);
  const json shown = cli_json(d, {"show", id, "1", "--json"});
  EXPECT_EQ(shown["result"]["progress"]["stage"], "c1") << "the last progress line is kept as the trial's result";
  EXPECT_EQ(cli_json(d, {"status", id, "--json"})["state"], "SUCCEEDED");
}

TEST(EarlyStopJob, WithoutTheSectionEveryTrialRunsToTheEnd) {
  TempDir dir;
  Daemon d(dir, {"--data-root", dir.path()});
  ASSERT_TRUE(d.start()) << d.log();
  // The reference and one 4-bit trial: the one that is pruned above runs to the end here.
  std::string plain = kJob;
  plain.replace(plain.find("trials: 3"), 9, "trials: 2");
  std::string watched;
  const std::string id = submit(d, dir, "plain.yaml", plain, &watched);
  const json trials = cli_json(d, {"trials", id, "--json", "--limit", "0"})["trials"];
  ASSERT_EQ(trials.size(), 2u) << trials.dump();
  for (const json& t : trials) {
    EXPECT_EQ(t["status"], "COMPLETE") << t.dump();
    EXPECT_EQ(t["tiers"].size(), 3u);
    EXPECT_EQ(t["relative_accuracy"].get<double>() < 99.9, !t["is_reference"].get<bool>()) << "under the gate, not stopped";
    EXPECT_FALSE(t.contains("early_stop"));
  }
  EXPECT_EQ(cli_json(d, {"status", id, "--json"})["trials_pruned"], 0);
  EXPECT_EQ(watched.find("PRUNED"), std::string::npos) << watched;
}

}  // namespace
}  // namespace soartune::daemon
