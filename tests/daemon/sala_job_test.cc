// A MiniCPM-SALA job end to end: configs/jobs/tiny-sala-cpu.yaml (its budget cut to 4 trials and its accuracy
// samples to 4) on the shared tiny-sala model, through the real soartuned, soartune-worker and soartune CLI.
// The job must succeed with every trial complete, each trial's stored config must hold the MiniCPM-SALA knobs,
// and `soartune export JOB --format yaml` must carry them with the exported trial's values.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

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

const char* const kSalaKnobs[] = {"softmax_attn_bits", "lightning_attn_bits", "mlp_bits",   "lightning_state_dtype",
                                  "lightning_chunk",   "sparse_attention",    "sparse_topk", "sparse_window"};

TEST(SalaJob, TinySalaCpuJobSucceedsAndExportsTheSalaKnobs) {
  const std::string model = std::string(SOARTUNE_SHARED_DIR) + "/models/tiny-sala";
  if (!std::filesystem::exists(model + "/config.json"))
    GTEST_SKIP() << "no shared test model at " << model << " (SOARTUNE_SHARED_DIR); skipped";
  // The shipped job, with the shared model's absolute path (the daemon runs from the build directory here),
  // a 4-trial budget and 4 accuracy samples.
  YAML::Node spec = YAML::LoadFile(std::string(SOARTUNE_SOURCE_DIR) + "/configs/jobs/tiny-sala-cpu.yaml");
  ASSERT_EQ(spec["model"].as<std::string>(), "hf:../shared/models/tiny-sala");
  spec["model"] = "hf:" + model;
  spec["accuracy"]["set"] = model + "/eval_public.jsonl";
  spec["accuracy"]["samples"] = 4;
  spec["budget"] = YAML::Load("{trials: 4}");
  spec["trial_timeout_s"] = 120;
  for (const char* k : {"lightning_attn_bits", "lightning_state_dtype", "lightning_chunk"})
    ASSERT_TRUE(spec["space"][k].IsDefined()) << "the job tunes " << k;

  TempDir dir;
  Daemon d(dir, {"--data-root", ".", "--data-root", dir.path(), "--data-root", SOARTUNE_SHARED_DIR});
  d.cli_timeout_s = 60;
  ASSERT_TRUE(d.start()) << d.log();
  TunerClient api(d.addr());
  std::stringstream text;
  text << spec;
  const std::string id = api.submit(text.str());
  ASSERT_FALSE(id.empty());
  const pb::Job j = api.wait_finished(id, 280);
  EXPECT_EQ(j.state(), pb::JOB_SUCCEEDED) << j.error() << "\n" << d.log();

  const std::vector<pb::Trial> ts = api.trials(id);
  ASSERT_EQ(ts.size(), 4u);
  for (const pb::Trial& t : ts) {
    EXPECT_EQ(t.status(), pb::TRIAL_COMPLETE) << "trial " << t.number() << ": " << t.error() << "\n" << t.log_tail();
    for (const char* k : kSalaKnobs) EXPECT_EQ(t.params().count(k), 1u) << "trial " << t.number() << " " << k;
  }
  // The reference trial runs the catalogue defaults for the new knobs.
  EXPECT_EQ(ts[0].params().at("lightning_state_dtype"), "fp32");
  EXPECT_EQ(ts[0].params().at("lightning_chunk"), "64");

  const pb::Trial best = api.best(id);
  const ProcessResult r = d.cli({"export", id, "--format", "yaml"});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err_tail;
  const YAML::Node exported = YAML::Load(r.out);
  ASSERT_TRUE(exported["launch"].IsMap()) << r.out;
  for (const char* k : kSalaKnobs) {
    ASSERT_TRUE(exported["launch"][k].IsDefined()) << k << " missing from the export:\n" << r.out;
    EXPECT_EQ(exported["launch"][k].as<std::string>(), best.params().at(k)) << k;
  }
  EXPECT_EQ(d.stop(), 0);
}

}  // namespace
}  // namespace soartune::daemon
