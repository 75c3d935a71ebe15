// The built soartune-worker end to end on synthetic:tiny: one JSON object on stdout (progress lines before it
// with --progress), exit codes.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct WorkerRun {
  int rc = -1;
  std::string out;
};

WorkerRun run_worker(const std::string& trial_text, const std::string& extra = "") {
#ifndef SOARTUNE_WORKER_PATH
  return {};
#else
  const fs::path dir = fs::temp_directory_path() / ("soartune-worker-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path trial = dir / "trial.yaml";
  std::ofstream(trial) << trial_text;
  const std::string cmd = std::string(SOARTUNE_WORKER_PATH) + " --trial " + trial.string() + " --threads 1 " + extra + " 2>/dev/null";
  WorkerRun r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
#endif
}

std::string trial(const std::string& launch, const std::string& reference = "") {
  return "model: synthetic:tiny\nbackend: auto\nseed: 3\nlaunch: " + launch +
         "\nworkload:\n  name: t\n  requests:\n    - {name: a, input_len: 8, output_len: 6, count: 2}\n"
         "    - {name: b, input_len: 24, output_len: 3, count: 1}\n"
         "tiers: [1, 8, 0]\naccuracy: {set: synthetic, samples: 4, prompt_len: 12, continuation_len: 6}\n" + reference;
}

TEST(Worker, RunsATrialAndPrintsOneJsonResult) {
#ifndef SOARTUNE_WORKER_PATH
  GTEST_SKIP() << "soartune-worker not built";
#endif
  const WorkerRun r = run_worker(trial("{weight_bits: 8, weight_group_size: 64, kv_cache_dtype: fp8_e5m2, max_prefill_tokens: 16}"));
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_NE(j["engine_build"].get<std::string>().find('+'), std::string::npos);
  ASSERT_EQ(j["tiers"].size(), 3u);
  const char* names[] = {"c1", "c8", "cinf"};
  for (int i = 0; i < 3; ++i) {
    const auto& t = j["tiers"][i];
    EXPECT_EQ(t["tier"], names[i]);
    EXPECT_EQ(t["requests"], 3);
    EXPECT_EQ(t["output_tokens"], 15);
    EXPECT_GT(t["duration_s"].get<double>(), 0);
    EXPECT_LE(t["ttft_ms"]["p50"].get<double>(), t["ttft_ms"]["p99"].get<double>());
  }
  EXPECT_EQ(j["accuracy"]["metric"], "fidelity");
  EXPECT_EQ(j["accuracy"]["positions"], 24);
  EXPECT_GT(j["accuracy"]["relative_pct"].get<double>(), 50);
  EXPECT_LE(j["accuracy"]["relative_pct"].get<double>(), 100);
  EXPECT_GT(j["peak_memory_bytes"].get<int64_t>(), 0);
}

// With --progress (as soartuned runs it): a progress line after the accuracy and after each tier, each with
// everything measured so far, then the result, which is read as without them.
TEST(Worker, ProgressLinesBeforeTheResult) {
#ifndef SOARTUNE_WORKER_PATH
  GTEST_SKIP() << "soartune-worker not built";
#endif
  const WorkerRun r = run_worker(trial("{weight_bits: 8, weight_group_size: 64}"), "--progress");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 5u) << r.out;
  const char* stages[] = {"accuracy", "c1", "c8", "cinf"};
  for (size_t i = 0; i < 4; ++i) {
    const auto& p = lines[i]["progress"];
    EXPECT_EQ(p["stage"], stages[i]);
    EXPECT_EQ(p["tiers"].size(), i);
    EXPECT_EQ(p["accuracy"]["relative_pct"], lines[4]["accuracy"]["relative_pct"]);
    if (i > 0) EXPECT_EQ(p["tiers"][i - 1]["duration_s"], lines[4]["tiers"][i - 1]["duration_s"]);
  }
  EXPECT_TRUE(lines[4]["ok"].get<bool>());
  EXPECT_FALSE(lines[4].contains("progress"));
}

TEST(Worker, ReferenceWriteThenRead) {
#ifndef SOARTUNE_WORKER_PATH
  GTEST_SKIP() << "soartune-worker not built";
#endif
  const fs::path ref = fs::temp_directory_path() / ("soartune-ref-" + std::to_string(::getpid()) + ".json");
  WorkerRun w = run_worker(trial("{}", "reference: {write: " + ref.string() + "}\n"));
  ASSERT_EQ(w.rc, 0) << w.out;
  EXPECT_EQ(nlohmann::json::parse(w.out)["accuracy"]["relative_pct"], 100.0);
  ASSERT_TRUE(fs::exists(ref));
  // The reference config read back against its own outputs scores 100; a 4-bit candidate scores less.
  WorkerRun same = run_worker(trial("{}", "reference: {read: " + ref.string() + "}\n"));
  ASSERT_EQ(same.rc, 0) << same.out;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(same.out)["accuracy"]["relative_pct"].get<double>(), 100.0);
  WorkerRun q4 = run_worker(trial("{weight_bits: 4, weight_group_size: 256}", "reference: {read: " + ref.string() + "}\n"));
  ASSERT_EQ(q4.rc, 0) << q4.out;
  EXPECT_LT(nlohmann::json::parse(q4.out)["accuracy"]["relative_pct"].get<double>(), 100.0);
  fs::remove(ref);
}

TEST(Worker, BadConfigExitsTwoNamingTheField) {
#ifndef SOARTUNE_WORKER_PATH
  GTEST_SKIP() << "soartune-worker not built";
#endif
  WorkerRun r = run_worker(trial("{kv_cache_dtype: fp9}"));
  EXPECT_EQ(r.rc, 2);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_EQ(j["error"]["field"], "launch.kv_cache_dtype");
  EXPECT_EQ(j["error"]["message"], "fp9 is not one of bf16, fp16, fp8_e4m3, fp8_e5m2");
  std::string bad_model = trial("{}");
  bad_model.replace(bad_model.find("synthetic:tiny"), 14, "synthetic:nope");
  r = run_worker(bad_model);
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(nlohmann::json::parse(r.out)["error"]["field"], "model");
  r = run_worker(trial("{weight_bits: 4, weight_group_size: 0}"), "--backend cuda");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(nlohmann::json::parse(r.out)["error"]["field"], "backend");
}

// Calibration rows (quant_method gptq) never include a row the accuracy is measured on: a named set that repeats
// measured rows has them left out (and counted), the accuracy set's own rows after the measured ones are used
// as they are, and a set holding nothing but measured rows is refused naming calibration.samples.
TEST(Worker, GptqNeverCalibratesOnAMeasuredRow) {
#ifndef SOARTUNE_WORKER_PATH
  GTEST_SKIP() << "soartune-worker not built";
#endif
  const fs::path dir = fs::temp_directory_path() / ("soartune-calibration-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto row = [](int k) {
    std::string p, c;
    for (int t = 0; t < 12; ++t) p += (t ? "," : "") + std::to_string(1 + (k * 37 + t * 11) % 250);
    for (int t = 0; t < 6; ++t) c += (t ? "," : "") + std::to_string(1 + (k * 53 + t * 7) % 250);
    return "{\"prompt_ids\": [" + p + "], \"continuation_ids\": [" + c + "]}\n";
  };
  const fs::path acc = dir / "accuracy.jsonl", named = dir / "calibration.jsonl";
  std::ofstream(acc) << row(0) << row(1) << row(2) << row(3) << row(4) << row(5);
  // Rows 1 and 3 of the accuracy set (measured) among three others.
  std::ofstream(named) << row(1) << row(10) << row(3) << row(11) << row(12);
  auto gptq_trial = [&](int measured, const std::string& calibration) {
    std::string t = trial("{weight_bits: 4, weight_group_size: 64, quant_method: gptq}");
    t.replace(t.find("accuracy: {"), std::string::npos,
              "accuracy: {set: " + acc.string() + ", samples: " + std::to_string(measured) + "}\n" + calibration);
    return t;
  };
  auto facts = [](const WorkerRun& r) { return nlohmann::json::parse(r.out)["quantization"]; };

  WorkerRun r = run_worker(gptq_trial(4, "calibration: {set: " + named.string() + ", samples: 3}\n"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(facts(r)["method"], "gptq");
  EXPECT_EQ(facts(r)["calibration_sequences"], 3);   // rows 10, 11, 12
  EXPECT_EQ(facts(r)["held_out_skipped"], 2);        // rows 1 and 3
  // Computed in this trial, on the trial's own backend (cpu without a GPU, cuda with one).
  EXPECT_EQ(facts(r)["solver"], nlohmann::json::parse(r.out)["backend"]);

  r = run_worker(gptq_trial(4, "calibration: {samples: 8}\n"));   // the accuracy set after its 4 measured rows
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(facts(r)["calibration_sequences"], 2);
  EXPECT_EQ(facts(r)["held_out_skipped"], 0);

  r = run_worker(gptq_trial(6, "calibration: {set: " + acc.string() + ", samples: 4}\n"));   // every row measured
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["error"]["field"], "calibration.samples");
  fs::remove_all(dir);
}

}  // namespace
