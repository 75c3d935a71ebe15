// A MiniCPM-SALA job end to end: configs/jobs/tiny-sala-cpu.yaml (its budget cut to 4 trials and its accuracy
// samples to 4) on the shared tiny-sala model, through the real soartuned, soartune-worker and soartune CLI.
// The job must succeed with every trial complete, each trial's stored config must hold the MiniCPM-SALA knobs,
// and `soartune export JOB --format yaml` must carry them with the exported trial's values.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "daemon/worker_process.h"
#include "soartune/v1/tuner.grpc.pb.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

namespace pb = ::soartune::v1;
using testing::TempDir;

extern "C" char** environ;

const char* const kSalaKnobs[] = {"softmax_attn_bits", "lightning_attn_bits", "mlp_bits",   "lightning_state_dtype",
                                  "lightning_chunk",   "sparse_attention",    "sparse_topk", "sparse_window"};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// soartuned on a free port with a temporary store and work directory, stopped when the test ends.
class SalaDaemon {
 public:
  explicit SalaDaemon(const TempDir& dir) : dir_(dir) {}
  ~SalaDaemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  void start() {
    const std::string port_file = dir_.file("port");
    std::vector<std::string> args = {SOARTUNED_PATH, "--port", "0", "--port-file", port_file,
                                     "--database", dir_.file("soartune.db"), "--work-dir", dir_.file("work"),
                                     "--workloads-dir", std::string(SOARTUNE_SOURCE_DIR) + "/configs/workloads",
                                     "--data-root", ".", "--data-root", dir_.path(), "--data-root", SOARTUNE_SHARED_DIR,
                                     "--worker", SOARTUNE_WORKER_PATH};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string log = dir_.file("soartuned.log");
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ASSERT_EQ(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 400 && port_ == 0; ++i) {
      std::ifstream in(port_file);
      if (in >> port_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_GT(port_, 0) << "soartuned did not report its port; log:\n" << read_text(log);
    stub_ = pb::Tuner::NewStub(grpc::CreateChannel(addr(), grpc::InsecureChannelCredentials()));
  }
  int stop() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string log() const { return read_text(dir_.file("soartuned.log")); }

  std::string submit(const std::string& spec) {
    grpc::ClientContext ctx;
    pb::SubmitJobRequest req;
    req.set_spec_yaml(spec);
    pb::Job job;
    const grpc::Status s = stub_->SubmitJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job.id();
  }
  pb::Job get(const std::string& id) {
    grpc::ClientContext ctx;
    pb::GetJobRequest req;
    req.set_job_id(id);
    pb::Job job;
    stub_->GetJob(&ctx, req, &job);
    return job;
  }
  pb::Job wait_finished(const std::string& id, int seconds) {
    pb::Job j;
    for (int i = 0; i < seconds * 10; ++i) {
      j = get(id);
      if (j.state() == pb::JOB_SUCCEEDED || j.state() == pb::JOB_FAILED || j.state() == pb::JOB_CANCELLED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return j;
  }
  std::vector<pb::Trial> trials(const std::string& id) {
    grpc::ClientContext ctx;
    pb::ListTrialsRequest req;
    req.set_job_id(id);
    req.set_page_size(1000);
    pb::ListTrialsResponse resp;
    EXPECT_TRUE(stub_->ListTrials(&ctx, req, &resp).ok());
    return {resp.trials().begin(), resp.trials().end()};
  }
  pb::Trial best(const std::string& id) {
    grpc::ClientContext ctx;
    pb::GetBestRequest req;
    req.set_job_id(id);
    pb::Trial t;
    EXPECT_TRUE(stub_->GetBest(&ctx, req, &t).ok());
    return t;
  }
  ProcessResult cli(std::vector<std::string> args) {
    ProcessSpec ps;
    ps.argv = {SOARTUNE_CLI_PATH, "--addr", addr()};
    ps.argv.insert(ps.argv.end(), args.begin(), args.end());
    ps.timeout_s = 60;
    return run_process(ps);
  }

 private:
  const TempDir& dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::unique_ptr<pb::Tuner::Stub> stub_;
};

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
  SalaDaemon d(dir);
  d.start();
  std::stringstream text;
  text << spec;
  const std::string id = d.submit(text.str());
  ASSERT_FALSE(id.empty());
  const pb::Job j = d.wait_finished(id, 280);
  EXPECT_EQ(j.state(), pb::JOB_SUCCEEDED) << j.error() << "\n" << d.log();

  const std::vector<pb::Trial> ts = d.trials(id);
  ASSERT_EQ(ts.size(), 4u);
  for (const pb::Trial& t : ts) {
    EXPECT_EQ(t.status(), pb::TRIAL_COMPLETE) << "trial " << t.number() << ": " << t.error() << "\n" << t.log_tail();
    for (const char* k : kSalaKnobs) EXPECT_EQ(t.params().count(k), 1u) << "trial " << t.number() << " " << k;
  }
  // The reference trial runs the catalogue defaults for the new knobs.
  EXPECT_EQ(ts[0].params().at("lightning_state_dtype"), "fp32");
  EXPECT_EQ(ts[0].params().at("lightning_chunk"), "64");

  const pb::Trial best = d.best(id);
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
