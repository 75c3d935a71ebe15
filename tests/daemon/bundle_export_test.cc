// `soartune export JOB --format sglang-bundle -o DIR` through the real soartuned, soartune-worker and CLI: a
// finished CPU job on the synthetic model with a MiniCPM-fork serving target exports a bundle whose
// prepare_env.sh, sourced in a clean shell, carries the race's base flags and the tuned flags once each; a
// config that quantises weights needs the worker's checkpoint mode, and when the worker cannot write the
// checkpoint the export fails with the worker's reason and leaves nothing in the client's directory.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "daemon_process.h"
#include "soartune/v1/tuner.grpc.pb.h"
#include "test_util.h"
#include "tuner_client.h"

namespace soartune::daemon {
namespace {

namespace pb = ::soartune::v1;
using testing::Daemon;
using testing::TempDir;
using testing::TunerClient;

std::string cpu_job(const std::string& fixed) {
  return "name: bundle\nmodel: synthetic:tiny\nbackend: cpu\nseed: 3\nbudget: {trials: 2}\ntrial_timeout_s: 120\n"
         "workload: {name: b, requests: [{name: a, input_len: 8, output_len: 4, count: 2}]}\n"
         "accuracy: {set: synthetic, samples: 2, prompt_len: 8, continuation_len: 4}\n"
         "serving: {engine: sglang-minicpm}\n" + fixed +
         "space:\n  kv_cache_dtype: {type: choice, values: [bf16, fp8_e4m3]}\n"
         "  max_running_requests: {type: pow2, low: 1, high: 8}\n";
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(BundleExport, SixteenBitJobExportsABundleWithBaseAndTunedFlagsOnce) {
  TempDir dir;
  Daemon d(dir, {});
  d.cli_timeout_s = 60;
  ASSERT_TRUE(d.start()) << d.log();
  TunerClient api(d.addr());
  const std::string id = api.submit(cpu_job(""));
  ASSERT_FALSE(id.empty());
  const pb::Job j = api.wait_finished(id, 240);
  ASSERT_EQ(j.state(), pb::JOB_SUCCEEDED) << j.error() << "\n" << d.log();
  const pb::Trial best = api.best(id);

  const std::string out_dir = dir.file("bundle");
  const ProcessResult r = d.cli({"export", id, "--format", "sglang-bundle", "-o", out_dir});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err_tail;
  namespace fs = std::filesystem;
  EXPECT_TRUE(fs::is_regular_file(out_dir + "/prepare_env.sh"));
  EXPECT_TRUE(fs::is_regular_file(out_dir + "/README.md"));
  EXPECT_FALSE(fs::exists(out_dir + "/checkpoint")) << "a 16-bit config serves the original checkpoint";

  ProcessSpec sh;
  sh.argv = {"/usr/bin/env", "-i", "/bin/sh", "-c", ". ./prepare_env.sh; echo \"$SGLANG_SERVER_ARGS\""};
  sh.cwd = out_dir;
  sh.timeout_s = 10;
  const ProcessResult env = run_process(sh);
  ASSERT_TRUE(env.exited && env.exit_code == 0) << env.err_tail;
  std::map<std::string, int> count;
  for (const std::string& w : words(env.out))
    if (w.rfind("--", 0) == 0) ++count[w];
  for (const char* f : {"--trust-remote-code", "--disable-radix-cache", "--attention-backend", "--dense-as-sparse",
                        "--skip-server-warmup", "--kv-cache-dtype", "--max-running-requests", "--page-size"})
    EXPECT_EQ(count[f], 1) << f << " in " << env.out;
  for (const auto& [flag, n] : count) EXPECT_EQ(n, 1) << flag;
  EXPECT_NE(env.out.find("--max-running-requests " + best.params().at("max_running_requests")), std::string::npos)
      << env.out;
  std::ifstream readme(out_dir + "/README.md");
  std::stringstream rs;
  rs << readme.rdbuf();
  EXPECT_NE(rs.str().find("trial " + std::to_string(best.number())), std::string::npos) << rs.str();
  EXPECT_NE(rs.str().find("synthetic test model"), std::string::npos) << rs.str();
  // Both trials are candidates for today's three submissions, so the planner gives the exported one a band.
  EXPECT_NE(rs.str().find("Predicted official score band: official final score"), std::string::npos) << rs.str();
  // The env-script export of the same job carries the base flags too.
  const ProcessResult es = d.cli({"export", id, "--format", "env-script"});
  ASSERT_TRUE(es.exited && es.exit_code == 0) << es.err_tail;
  EXPECT_NE(es.out.find("SGLANG_SERVER_ARGS=\"--trust-remote-code --disable-radix-cache"), std::string::npos) << es.out;
  EXPECT_EQ(d.stop(), 0);
}

TEST(BundleExport, QuantisedConfigFailsWithTheWorkersReasonWhenNoCheckpointCanBeWritten) {
  TempDir dir;
  // The real worker for trials; its checkpoint mode answers as the contract's error path does.
  const std::string worker = testing::write_script(
      dir.file("worker.sh"),
      "for a in \"$@\"; do if [ \"$a\" = --write-checkpoint ]; then\n"
      "  echo '{\"ok\": false, \"error\": \"model synthetic:tiny: no checkpoint to quantise\"}'; exit 2; fi; done\n"
      "exec " SOARTUNE_WORKER_PATH " \"$@\"\n");
  Daemon d(dir, {});
  d.worker = worker;
  d.cli_timeout_s = 60;
  ASSERT_TRUE(d.start()) << d.log();
  TunerClient api(d.addr());
  const std::string id = api.submit(cpu_job("fixed: {weight_bits: 8}\n"));
  ASSERT_FALSE(id.empty());
  const pb::Job j = api.wait_finished(id, 240);
  ASSERT_EQ(j.state(), pb::JOB_SUCCEEDED) << j.error() << "\n" << d.log();
  const std::string out_dir = dir.file("bundle");
  const ProcessResult r = d.cli({"export", id, "--format", "sglang-bundle", "-o", out_dir});
  ASSERT_TRUE(r.exited);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err_tail.find("--write-checkpoint failed: model synthetic:tiny: no checkpoint to quantise"),
            std::string::npos)
      << r.err_tail;
  EXPECT_FALSE(std::filesystem::exists(out_dir + "/prepare_env.sh"));
  EXPECT_EQ(d.stop(), 0);
}

}  // namespace
}  // namespace soartune::daemon
