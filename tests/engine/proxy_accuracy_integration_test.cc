// Proxy accuracy through the built soartune-worker: a trial on synthetic:tiny with accuracy.model naming the
// trained tiny-llama-bpe4k measures accuracy on that model (its reference written, then read) and durations on
// the synthetic one, and says so in its result (accuracy.proxy, accuracy.proxy_model).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tiny_model.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct WorkerRun {
  int rc = -1;
  json out;
  double wall_s = 0;   // the process, start to exit
};

WorkerRun worker(const fs::path& dir, const std::string& name, const std::string& text) {
  WorkerRun r;
#ifdef SOARTUNE_WORKER_PATH
  const fs::path trial = dir / name;
  std::ofstream(trial) << text;
  const std::string cmd = std::string(SOARTUNE_WORKER_PATH) + " --trial " + trial.string() + " --threads 1 2>/dev/null";
  std::string out;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = json::parse(out, nullptr, false);
#endif
  return r;
}

std::string trial(const std::string& launch, const std::string& accuracy_model, const std::string& reference) {
  return "model: synthetic:tiny\nbackend: cpu\nseed: 3\nlaunch: " + launch +
         "\nworkload:\n  name: t\n  requests:\n    - {name: a, input_len: 8, output_len: 4, count: 2}\n"
         "tiers: [1, 8, 0]\naccuracy: {set: synthetic, samples: 4, prompt_len: 12, continuation_len: 6, model: " +
         accuracy_model + "}\n" + reference;
}

TEST(ProxyAccuracy, MeasuredOnTheTrainedModelAndLabelled) {
#ifndef SOARTUNE_WORKER_PATH
  GTEST_SKIP() << "soartune-worker not built";
#endif
  SKIP_WITHOUT_TINY_MODEL();
  const fs::path dir = fs::temp_directory_path() / ("soartune-proxy-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string proxy = "hf:" + soartune::engine::testing::tiny_model_dir();
  const fs::path ref = dir / "reference.json";

  WorkerRun r0 = worker(dir, "t0.yaml", trial("{}", proxy, "reference: {write: " + ref.string() + "}\n"));
  ASSERT_EQ(r0.rc, 0) << r0.out.dump();
  EXPECT_TRUE(r0.out["accuracy"]["proxy"].get<bool>());
  EXPECT_EQ(r0.out["accuracy"]["proxy_model"], proxy);
  EXPECT_DOUBLE_EQ(r0.out["accuracy"]["relative_pct"].get<double>(), 100.0);
  ASSERT_EQ(r0.out["tiers"].size(), 3u);
  // The reference outputs are the trained model's: its vocabulary, not the synthetic model's.
  ASSERT_TRUE(fs::exists(ref));

  WorkerRun q4 = worker(dir, "t1.yaml", trial("{weight_bits: 4, weight_group_size: 256}", proxy,
                                        "reference: {read: " + ref.string() + "}\n"));
  ASSERT_EQ(q4.rc, 0) << q4.out.dump();
  EXPECT_TRUE(q4.out["accuracy"]["proxy"].get<bool>());
  const double acc = q4.out["accuracy"]["relative_pct"].get<double>();
  EXPECT_LT(acc, 100.0);
  EXPECT_GT(acc, 0.0);
  // Durations still come from the synthetic model: the tiers ran.
  for (const auto& t : q4.out["tiers"]) EXPECT_GT(t["duration_s"].get<double>(), 0.0);
  // Where the time went, each second counted once: the proxy's accuracy pass runs while the timed model is being
  // set up, and is in accuracy, not in load too; weights and prepare are parts of load.
  const json& ts = q4.out["timings_s"];
  const double load = ts["load"].get<double>(), accuracy = ts["accuracy"].get<double>();
  EXPECT_GT(accuracy, 0.0);
  EXPECT_GT(ts["weights"].get<double>(), 0.0);
  EXPECT_GT(ts["prepare"].get<double>(), 0.0);
  EXPECT_LE(ts["weights"].get<double>() + ts["prepare"].get<double>(), load);
  EXPECT_LE(load + accuracy + ts["tiers"].get<double>(), q4.wall_s);

  // A proxy that is not a model directory is the trial's error, naming the field.
  WorkerRun bad = worker(dir, "t2.yaml", trial("{}", "hf:" + (dir / "nothing").string(), ""));
  EXPECT_EQ(bad.rc, 2);
  EXPECT_EQ(bad.out["error"]["field"], "accuracy.model");
  fs::remove_all(dir);
}

TEST(ProxyAccuracy, WithoutAProxyTheResultSaysNothingOfOne) {
#ifndef SOARTUNE_WORKER_PATH
  GTEST_SKIP() << "soartune-worker not built";
#endif
  const fs::path dir = fs::temp_directory_path() / ("soartune-noproxy-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string text = trial("{}", "x", "");
  text.replace(text.find(", model: x"), 10, "");
  WorkerRun r = worker(dir, "t.yaml", text);
  ASSERT_EQ(r.rc, 0) << r.out.dump();
  EXPECT_FALSE(r.out["accuracy"].contains("proxy"));
  fs::remove_all(dir);
}

}  // namespace
