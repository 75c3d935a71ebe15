// A multi-fidelity job through the real soartuned, soartune-worker and CLI on the synthetic tiny model: each
// level gets its reference trial, new configs are screened at the low level with the shortened workload in
// their trial file, the top 1/eta of the level is promoted to the full run, every trial says its fidelity, and
// best, rankings, export and the submission planner see the full runs only.
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "daemon_process.h"

namespace soartune::daemon {
namespace {

using nlohmann::json;
using testing::Daemon;
using testing::TempDir;

// Two request classes of 2 requests and 4 accuracy samples: level 0.5 runs 1 request of each (half the output
// tokens) and 2 samples.
const char* kJob = R"(name: mf
model: synthetic:tiny
backend: cpu
seed: 11
strategy: bayes
budget: {trials: 12}
trial_timeout_s: 120
workload: {name: mf, requests: [{name: a, input_len: 8, output_len: 8, count: 2}, {name: b, input_len: 32, output_len: 4, count: 2}]}
accuracy: {set: synthetic, samples: 4, prompt_len: 16, continuation_len: 8}
multi_fidelity: {levels: [0.5, 1], eta: 2}
space:
  weight_bits: {type: choice, values: [16, 8, 4]}
  kv_cache_dtype: {type: choice, values: [bf16, fp8_e4m3]}
  max_running_requests: {type: pow2, low: 1, high: 8}
)";

json cli_json(Daemon& d, std::vector<std::string> args) {
  ProcessResult r = d.cli(std::move(args));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err_tail;
  return json::parse(r.out, nullptr, false);
}

TEST(MultiFidelityJob, ScreensPromotesAndRanksFullRunsOnly) {
  TempDir dir;
  Daemon d(dir, {"--data-root", dir.path()});
  ASSERT_TRUE(d.start()) << d.log();
  const std::string spec = testing::write_file(dir.file("job.yaml"), kJob);
  ProcessResult sub = d.cli({"submit", spec, "--watch", "--plain"});
  ASSERT_EQ(sub.exit_code, 0) << sub.out << sub.err_tail << d.log();
  const std::string id = sub.out.substr(0, sub.out.find_first_of(" \n"));

  const json trials = cli_json(d, {"trials", id, "--json", "--limit", "0"})["trials"];
  ASSERT_TRUE(trials.is_array());
  ASSERT_EQ(trials.size(), 12u);
  std::map<std::string, std::set<double>> levels_of;   // params -> the fidelities it ran at
  int references = 0, promotions = 0, screening = 0;
  for (const json& t : trials) {
    ASSERT_EQ(t["status"], "COMPLETE") << t.dump();
    const double f = t["fidelity"].get<double>();
    EXPECT_TRUE(f == 0.5 || f == 1.0) << f;
    levels_of[t["params"].dump()].insert(f);
    references += t["is_reference"].get<bool>();
    screening += f == 0.5;
    if (t["suggestion"]["strategy"] == "promotion") {
      ++promotions;
      EXPECT_EQ(f, 1.0);
      EXPECT_TRUE(levels_of[t["params"].dump()].count(0.5)) << "a promoted config was screened first";
    } else if (!t["is_reference"].get<bool>()) {
      EXPECT_EQ(f, 0.5) << "a new config starts at the low level";
    }
    // The trial file carries the level: the shortened workload and samples, and its fidelity.
    char name[32];
    std::snprintf(name, sizeof name, "trial-%04d.yaml", t["number"].get<int>());
    YAML::Node file = YAML::LoadFile((std::filesystem::path(dir.file("work")) / id / name).string());
    EXPECT_EQ(file["workload"]["requests"][0]["count"].as<int>(), f < 1 ? 1 : 2);
    EXPECT_EQ(file["workload"]["requests"][0]["output_len"].as<int>(), f < 1 ? 4 : 8);
    EXPECT_EQ(file["accuracy"]["samples"].as<int>(), f < 1 ? 2 : 4);
    EXPECT_EQ(file["fidelity"].IsDefined(), f < 1);
  }
  EXPECT_EQ(references, 2) << "one reference per level";
  EXPECT_GE(screening, 5);
  EXPECT_GE(promotions, 1);

  // best, the score ranking and the export are of full runs.
  const json best = cli_json(d, {"best", id, "--json"});
  EXPECT_EQ(best["fidelity"], 1.0);
  const json ranked = cli_json(d, {"trials", id, "--json", "--sort", "-score", "--limit", "0"})["trials"];
  bool seen_screening = false;
  for (const json& t : ranked) {
    if (t["fidelity"] == 0.5) seen_screening = true;
    else EXPECT_FALSE(seen_screening) << "a full run ranked below a screening run";
  }
  EXPECT_EQ(ranked[0]["number"], best["number"]);
  int screening_trial = -1;
  for (const json& t : trials)
    if (t["fidelity"] == 0.5) screening_trial = t["number"].get<int>();
  ProcessResult exp = d.cli({"export", id, "--trial", std::to_string(screening_trial)});
  EXPECT_NE(exp.exit_code, 0);
  EXPECT_NE(exp.err_tail.find("only full-fidelity trials are exported"), std::string::npos) << exp.err_tail;
  EXPECT_EQ(d.cli({"export", id}).exit_code, 0);
  const json plan = cli_json(d, {"plan", id, "--json"});
  ASSERT_TRUE(plan["picks"].is_array()) << plan;
  EXPECT_FALSE(plan["picks"].empty()) << plan;
  for (const json& p : plan["picks"])
    for (const json& t : trials)
      if (t["number"] == p["trial"]) EXPECT_EQ(t["fidelity"], 1.0) << "planned a screening run: " << p;
  // The table shows the fidelity column for a job with screening runs.
  ProcessResult table = d.cli({"trials", id, "--limit", "0"});
  EXPECT_NE(table.out.find("fidelity"), std::string::npos) << table.out;
}

}  // namespace
}  // namespace soartune::daemon
