// The executor settings of the daemon config (errors name the field) and what each Slurm end state means for a
// trial. The Slurm executor itself runs against a real cluster in slurm_executor_test.cc.
#include <gtest/gtest.h>

#include "daemon/daemon_config.h"
#include "daemon/executor_slurm.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::TempDir;
using testing::write_file;

soartune::Status load(const TempDir& dir, const std::string& yaml, DaemonConfig& cfg) {
  const std::string path = write_file(dir.file("daemon.yaml"), yaml);
  if (soartune::Status s = load_daemon_config(path, cfg); !s.ok()) return s;
  return finish_daemon_config(cfg, dir.file("bin/soartuned"), path);
}

void expect_error(const std::string& yaml, const std::string& field) {
  TempDir dir;
  DaemonConfig cfg;
  soartune::Status s = load(dir, yaml, cfg);
  ASSERT_FALSE(s.ok()) << yaml;
  EXPECT_EQ(s.message.rfind(field + ":", 0), 0u) << s.message;
}

TEST(ExecutorConfig, LocalIsTheDefault) {
  TempDir dir;
  DaemonConfig cfg;
  ASSERT_TRUE(load(dir, "devices: [cpu, cpu:1]\n", cfg).ok());
  EXPECT_EQ(cfg.executor, "local");
  EXPECT_EQ(cfg.devices.size(), 2u);
}

TEST(ExecutorConfig, SlurmJobsAreTheSlots) {
  TempDir dir;
  DaemonConfig cfg;
  soartune::Status s = load(dir,
                            "executor: slurm\nslurm: {jobs: 3, device: cuda:0, poll_s: 5, "
                            "sbatch_args: [--gres=gpu:1, --partition=gpu]}\n",
                            cfg);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(cfg.executor, "slurm");
  EXPECT_EQ(cfg.devices, std::vector<std::string>(3, "cuda:0"));
  EXPECT_EQ(cfg.parallel_trials, 3);
  EXPECT_EQ(cfg.slurm.sbatch_args, (std::vector<std::string>{"--gres=gpu:1", "--partition=gpu"}));
  EXPECT_DOUBLE_EQ(cfg.slurm.poll_s, 5);
}

TEST(ExecutorConfig, BadValuesNameTheirField) {
  expect_error("executor: kubernetes\n", "executor");
  expect_error("executor: slurm\nslurm: {jobs: 0}\n", "slurm.jobs");
  expect_error("executor: slurm\nslurm: {device: tpu}\n", "slurm.device");
  expect_error("executor: slurm\nslurm: {poll_s: 0}\n", "slurm.poll_s");
  expect_error("executor: slurm\nslurm: {gres: gpu}\n", "slurm.gres");
  expect_error("executor: slurm\nslurm: {sbatch_args: --gres=gpu:1}\n", "slurm.sbatch_args");
}

TEST(SlurmEndState, EachStateMeansOneThing) {
  for (const char* s : {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED"})
    EXPECT_TRUE(slurm_end_state(s).in_flight) << s;
  EXPECT_TRUE(slurm_end_state("COMPLETED").read_worker);
  EXPECT_TRUE(slurm_end_state("FAILED").read_worker);
  EXPECT_TRUE(slurm_end_state("CANCELLED").cancelled);
  EXPECT_EQ(slurm_end_state("TIMEOUT").failure, FailureKind::kTimeout);
  EXPECT_EQ(slurm_end_state("DEADLINE").failure, FailureKind::kTimeout);
  EXPECT_EQ(slurm_end_state("OUT_OF_MEMORY").failure, FailureKind::kOutOfMemory);
  EXPECT_EQ(slurm_end_state("NODE_FAIL").failure, FailureKind::kNodeFailure);
  EXPECT_EQ(slurm_end_state("BOOT_FAIL").failure, FailureKind::kNodeFailure);
  EXPECT_EQ(slurm_end_state("PREEMPTED").failure, FailureKind::kPreempted);
  // Failures Slurm imposes from outside teach the failure model nothing about the config; OOM and timeout do.
  EXPECT_FALSE(is_about_the_config(FailureKind::kNodeFailure));
  EXPECT_FALSE(is_about_the_config(FailureKind::kPreempted));
  EXPECT_TRUE(is_about_the_config(FailureKind::kOutOfMemory));
}

}  // namespace
}  // namespace soartune::daemon
