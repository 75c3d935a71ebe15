// executor: slurm on a real single-node Slurm cluster that the test starts from Debian's packages (munged,
// slurmctld, slurmd, as the current user, in a temporary directory, on free ports), with the real soartuned and
// soartune-worker: trials run as Slurm jobs, an `scancel` of one makes it a FAILED trial of kind cancelled, a
// daemon killed with SIGKILL while a trial runs in Slurm re-attaches to it when restarted, and so does one stopped
// with SIGTERM (no trial runs twice), and the job finishes; with early_stop: the progress lines are read from the
// shared directory and a hopeless trial is scancelled and PRUNED. Skipped, saying why, only where those programs are missing or cannot start here.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "daemon/logged_process.h"
#include "daemon/worker_process.h"
#include "daemon_process.h"
#include "soartune/v1/tuner.grpc.pb.h"
#include "test_util.h"
#include "tuner_client.h"

namespace soartune::daemon {
namespace {

namespace fs = std::filesystem;
namespace pb = ::soartune::v1;
using testing::Daemon;
using testing::read_text;
using testing::TempDir;
using testing::TunerClient;
using testing::write_file;
using testing::write_script;

std::string find_program(const std::string& name) {
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"}) {
    fs::path p = fs::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

void stop(pid_t& pid, int sig = SIGTERM) {
  if (pid <= 0) return;
  ::kill(pid, sig);
  ::waitpid(pid, nullptr, 0);
  pid = -1;
}

ProcessResult run(std::vector<std::string> argv) {
  ProcessSpec ps;
  ps.argv = std::move(argv);
  ps.env = {{"SLURM_CONF", std::getenv("SLURM_CONF") ? std::getenv("SLURM_CONF") : ""}};
  ps.timeout_s = 30;
  return run_process(ps);
}

// munged, slurmctld and slurmd in the foreground, children of the test, configured for this host only.
class SlurmCluster {
 public:
  explicit SlurmCluster(const TempDir& dir) : dir_(dir) {}
  ~SlurmCluster() {
    stop(slurmd_);
    stop(slurmctld_);
    stop(munged_);
  }

  // "" when the cluster is up with its node idle; otherwise why not.
  std::string start() {
    const std::string munged = find_program("munged"), ctld = find_program("slurmctld"), slurmd = find_program("slurmd");
    squeue_ = find_program("squeue");
    scancel_ = find_program("scancel");
    sinfo_ = find_program("sinfo");
    if (munged.empty() || ctld.empty() || slurmd.empty() || squeue_.empty() || sinfo_.empty())
      return "munge or Slurm is not installed (scripts/install-deps.sh installs munge, slurmctld, slurmd, slurm-client)";
    const std::string m = dir_.file("munge");
    fs::create_directories(m);
    fs::permissions(m, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
    {
      // A fresh key for this cluster only: 1024 random bytes, readable by its owner alone.
      std::ifstream rnd("/dev/urandom", std::ios::binary);
      std::string key(1024, '\0');
      rnd.read(key.data(), static_cast<std::streamsize>(key.size()));
      std::ofstream(m + "/munge.key", std::ios::binary) << key;
      fs::permissions(m + "/munge.key", fs::perms::owner_read | fs::perms::owner_write);
    }
    socket_ = m + "/munge.socket";
    munged_ = spawn_logged({munged, "-F", "--force", "--socket=" + socket_, "--key-file=" + m + "/munge.key",
                     "--pid-file=" + m + "/munged.pid", "--log-file=" + m + "/munged.log",
                     "--seed-file=" + m + "/munged.seed"},
                    dir_.file("munged.out"));
    for (int i = 0; i < 50 && !fs::exists(socket_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!fs::exists(socket_)) return "munged did not start: " + read_text(dir_.file("munged.out")) + read_text(m + "/munged.log");

    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string node = host;
    node = node.substr(0, node.find('.'));
    const std::string user = std::getenv("USER") ? std::getenv("USER") : (::getuid() == 0 ? "root" : "");
    for (const char* d : {"state", "spool", "log"}) fs::create_directories(dir_.file(d));
    const std::string conf = write_file(dir_.file("slurm.conf"),
        "ClusterName=soartunetest\n"
        "SlurmctldHost=" + node + "(127.0.0.1)\n" +
        (user.empty() ? "" : "SlurmUser=" + user + "\nSlurmdUser=" + user + "\n") +
        "SlurmctldPort=" + std::to_string(free_port()) + "\n"
        "SlurmdPort=" + std::to_string(free_port()) + "\n"
        "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" + socket_ + "\n"
        "StateSaveLocation=" + dir_.file("state") + "\nSlurmdSpoolDir=" + dir_.file("spool") + "\n"
        "SlurmctldPidFile=" + dir_.file("slurmctld.pid") + "\nSlurmdPidFile=" + dir_.file("slurmd.pid") + "\n"
        "SlurmctldLogFile=" + dir_.file("log/slurmctld.log") + "\nSlurmdLogFile=" + dir_.file("log/slurmd.log") + "\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nSchedulerType=sched/builtin\n"
        "MpiDefault=none\nReturnToService=2\nJobCompType=jobcomp/none\nJobAcctGatherType=jobacct_gather/none\n"
        "AccountingStorageType=accounting_storage/none\nMinJobAge=300\nKillWait=2\nInactiveLimit=0\n"
        "NodeName=" + node + " NodeAddr=127.0.0.1 CPUs=" + std::to_string(std::thread::hardware_concurrency()) +
        " State=UNKNOWN\n"
        "PartitionName=test Nodes=" + node + " Default=YES MaxTime=INFINITE State=UP\n");
    ::setenv("SLURM_CONF", conf.c_str(), 1);
    slurmctld_ = spawn_logged({ctld, "-D", "-c", "-i", "-f", conf}, dir_.file("slurmctld.out"));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    slurmd_ = spawn_logged({slurmd, "-D", "-f", conf}, dir_.file("slurmd.out"));
    for (int i = 0; i < 100; ++i) {
      ProcessResult r = run({sinfo_, "-h", "-o", "%t"});
      if (r.exited && r.exit_code == 0 && r.out.rfind("idle", 0) == 0) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return "the Slurm node did not come up idle within 20 s; slurmctld: " +
           last_lines(read_text(dir_.file("log/slurmctld.log")) + read_text(dir_.file("slurmctld.out")), 5, 2000) +
           "; slurmd: " + last_lines(read_text(dir_.file("log/slurmd.log")) + read_text(dir_.file("slurmd.out")), 5, 2000);
  }

  // Slurm job id -> (name, state) of every job Slurm still knows.
  std::map<int64_t, std::pair<std::string, std::string>> jobs() const {
    std::map<int64_t, std::pair<std::string, std::string>> out;
    ProcessResult r = run({squeue_, "-h", "--states=all", "-o", "%i %j %T"});
    std::istringstream in(r.out);
    int64_t id;
    std::string name, state;
    while (in >> id >> name >> state) out[id] = {name, state};
    return out;
  }
  bool scancel(int64_t id) const {
    ProcessResult r = run({scancel_, std::to_string(id)});
    return r.exited && r.exit_code == 0;
  }

 private:
  const TempDir& dir_;
  std::string socket_, squeue_, scancel_, sinfo_;
  pid_t munged_ = -1, slurmctld_ = -1, slurmd_ = -1;
};

template <typename F>
bool wait_for(F&& done, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

bool finished(const pb::Job& j) {
  return j.state() == pb::JOB_SUCCEEDED || j.state() == pb::JOB_FAILED || j.state() == pb::JOB_CANCELLED;
}

TEST(SlurmExecutor, TrialsRunAsSlurmJobsScancelFailsOneARestartedDaemonReattaches) {
  TempDir dir;
  SlurmCluster cluster(dir);
  if (std::string why = cluster.start(); !why.empty()) GTEST_SKIP() << "no Slurm cluster here: " << why;

  // The real worker behind a wrapper that logs each start (to count runs) and holds the trial 3 s, long enough
  // to scancel it or kill the daemon while it runs in Slurm.
  const std::string runs = dir.file("runs.log");
  const std::string worker = write_script(dir.file("worker.sh"),
      "echo \"$2\" >> '" + runs + "'\nsleep 3\nexec '" + std::string(SOARTUNE_WORKER_PATH) + "' \"$@\"");
  const std::string config = write_file(dir.file("daemon.yaml"),
      "listen: 127.0.0.1:0\nport_file: " + dir.file("port") + "\ndatabase: " + dir.file("soartune.db") +
      "\nwork_dir: " + dir.file("work") + "\nworker: " + worker +
      "\nworkloads_dir: " + std::string(SOARTUNE_SOURCE_DIR) + "/configs/workloads\n"
      "executor: slurm\nslurm: {jobs: 1, device: cpu, poll_s: 0.3, sbatch_args: [--cpus-per-task=1]}\n");
  const std::string spec =
      "name: slurm\nmodel: synthetic:tiny\nbackend: cpu\nseed: 7\nstrategy: random\nbudget: {trials: 6}\n"
      "trial_timeout_s: 120\n"
      "workload: {name: s, requests: [{name: a, input_len: 8, output_len: 4, count: 1}]}\n"
      "accuracy: {set: synthetic, samples: 2, prompt_len: 8, continuation_len: 4}\n"
      "space:\n  weight_bits: {type: choice, values: [16, 8, 4]}\n"
      "  max_running_requests: {type: pow2, low: 1, high: 8}\n";

  // The config names the same port file, database, work dir and worker that daemon_process.h passes.
  Daemon d(dir, {"--config", config, "--log-level", "debug"});
  d.worker = worker;
  ASSERT_TRUE(d.start()) << d.log();
  std::unique_ptr<TunerClient> api = std::make_unique<TunerClient>(d.addr());
  // Each start picks a new port: the client follows it.
  auto restart = [&] {
    if (!d.start()) return false;
    api = std::make_unique<TunerClient>(d.addr());
    return true;
  };
  const std::string job = api->submit(spec);
  ASSERT_FALSE(job.empty());
  const std::string prefix = "soartune-" + job + "-";
  // The Slurm job of trial n, once Slurm runs it.
  auto running_trial = [&](int64_t& slurm_id, int64_t& number, int64_t min_number) {
    for (const auto& [id, js] : cluster.jobs()) {
      if (js.first.rfind(prefix, 0) != 0 || js.second != "RUNNING") continue;
      const int64_t n = std::stoll(js.first.substr(prefix.size()));
      if (n < min_number) continue;
      slurm_id = id;
      number = n;
      return true;
    }
    return false;
  };

  // scancel a running trial (not the reference): it is FAILED, kind cancelled, and the job goes on.
  int64_t cancelled_slurm = 0, cancelled_trial = -1;
  ASSERT_TRUE(wait_for([&] { return running_trial(cancelled_slurm, cancelled_trial, 1); }, 60)) << d.log();
  ASSERT_TRUE(cluster.scancel(cancelled_slurm));
  auto trial_status = [&](int64_t n) {
    for (const pb::Trial& t : api->trials(job))
      if (t.number() == n) return t;
    return pb::Trial{};
  };
  ASSERT_TRUE(wait_for([&] { return trial_status(cancelled_trial).status() != pb::TRIAL_RUNNING; }, 30)) << d.log();
  pb::Trial c = trial_status(cancelled_trial);
  EXPECT_EQ(c.status(), pb::TRIAL_FAILED) << c.error();
  EXPECT_EQ(c.failure_kind(), pb::FAILURE_CANCELLED) << c.error();
  EXPECT_NE(c.error().find("scancel"), std::string::npos) << c.error();

  // Kill the daemon while a later trial runs in Slurm; the restarted daemon waits for that same Slurm job.
  int64_t held_slurm = 0, held_trial = -1;
  ASSERT_TRUE(wait_for([&] { return running_trial(held_slurm, held_trial, cancelled_trial + 1); }, 60)) << d.log();
  d.kill_hard();
  ASSERT_TRUE(restart()) << d.log();
  // Stop it cleanly while another trial runs: it leaves that trial running in Slurm, and the next start
  // re-attaches to it as well.
  int64_t left_slurm = 0, left_trial = -1;
  ASSERT_TRUE(wait_for([&] { return running_trial(left_slurm, left_trial, held_trial + 1); }, 60)) << d.log();
  const int status = d.stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "soartuned did not exit 0 on SIGTERM";
  ASSERT_TRUE(restart()) << d.log();
  pb::Job end;
  ASSERT_TRUE(wait_for([&] { return finished(end = api->get(job)); }, 180)) << d.log();
  EXPECT_EQ(end.state(), pb::JOB_SUCCEEDED) << end.error() << "\n" << d.log();
  EXPECT_NE(d.log().find("re-attached to Slurm job " + std::to_string(held_slurm)), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("re-attached to Slurm job " + std::to_string(left_slurm)), std::string::npos) << d.log();

  const std::vector<pb::Trial> ts = api->trials(job);
  std::map<std::string, int> starts;   // trial file -> how many times a worker started on it
  {
    std::istringstream in(read_text(runs));
    for (std::string line; std::getline(in, line);) ++starts[line];
  }
  int slurm_jobs = 0;
  for (const auto& [id, js] : cluster.jobs()) slurm_jobs += js.first.rfind(prefix, 0) == 0;
  EXPECT_EQ(slurm_jobs, static_cast<int>(ts.size())) << "one Slurm job per trial";
  for (const pb::Trial& t : ts) {
    char name[64];
    std::snprintf(name, sizeof name, "trial-%04lld.yaml", static_cast<long long>(t.number()));
    const std::string file = (fs::path(dir.file("work")) / job / name).string();
    EXPECT_EQ(starts[file], 1) << "trial " << t.number() << " ran " << starts[file] << " times";
    EXPECT_NE(t.failure_kind(), pb::FAILURE_RESTART) << "trial " << t.number() << ": " << t.error();
    if (t.number() == cancelled_trial) continue;
    EXPECT_EQ(t.status(), pb::TRIAL_COMPLETE) << "trial " << t.number() << ": " << t.error();
  }
  EXPECT_EQ(trial_status(held_trial).status(), pb::TRIAL_COMPLETE);
  EXPECT_EQ(trial_status(left_trial).status(), pb::TRIAL_COMPLETE);
}

// Early stop with executor slurm: the runner reads the worker's progress lines from its stdout file on the shared
// directory at each poll, and a trial whose accuracy fails the gate (after_tiers 0) is scancelled and PRUNED.
TEST(SlurmExecutor, EarlyStopReadsProgressFromTheSharedDirectoryAndScancels) {
  TempDir dir;
  SlurmCluster cluster(dir);
  if (std::string why = cluster.start(); !why.empty()) GTEST_SKIP() << "no Slurm cluster here: " << why;
  const std::string config = write_file(dir.file("daemon.yaml"),
      "listen: 127.0.0.1:0\nport_file: " + dir.file("port") + "\ndatabase: " + dir.file("soartune.db") +
      "\nwork_dir: " + dir.file("work") + "\nworker: " + std::string(SOARTUNE_WORKER_PATH) +
      "\nworkloads_dir: " + std::string(SOARTUNE_SOURCE_DIR) + "/configs/workloads\n"
      "executor: slurm\nslurm: {jobs: 1, device: cpu, poll_s: 0.3, sbatch_args: [--cpus-per-task=1]}\n");
  // Every 4-bit config is under the 99.9% gate; c1 (8 requests at concurrency 1) outlasts a few polls.
  const std::string spec =
      "name: slurm-early-stop\nmodel: synthetic:tiny\nbackend: cpu\nseed: 7\nstrategy: random\nbudget: {trials: 2}\n"
      "trial_timeout_s: 120\n"
      "workload: {name: s, requests: [{name: a, input_len: 16, output_len: 64, count: 8}]}\n"
      "accuracy: {set: synthetic, samples: 4, prompt_len: 16, continuation_len: 16}\n"
      "scoring: {gate: [{above: 99.9, c: 1.0}]}\n"
      "space:\n  weight_bits: {type: choice, values: [4]}\n"
      "early_stop: {after_tiers: 0, margin_pct: 5}\n";
  Daemon d(dir, {"--config", config});
  ASSERT_TRUE(d.start()) << d.log();
  TunerClient api(d.addr());
  const std::string job = api.submit(spec);
  ASSERT_FALSE(job.empty());
  pb::Job end;
  ASSERT_TRUE(wait_for([&] { return finished(end = api.get(job)); }, 120)) << d.log();
  EXPECT_EQ(end.state(), pb::JOB_SUCCEEDED) << end.error() << "\n" << d.log();
  const std::vector<pb::Trial> ts = api.trials(job);
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(ts[0].status(), pb::TRIAL_COMPLETE);
  EXPECT_EQ(ts[1].status(), pb::TRIAL_PRUNED) << ts[1].error() << "\n" << d.log();
  EXPECT_EQ(ts[1].early_stop().stage(), "accuracy");
  EXPECT_EQ(ts[1].failure_kind(), pb::FAILURE_KIND_UNSPECIFIED);
  EXPECT_EQ(ts[1].tiers_size(), 0);
  // Slurm says it was cancelled: by the daemon's scancel, not run to the end.
  const std::string prefix = "soartune-" + job + "-1";
  bool seen = false;
  for (const auto& [id, js] : cluster.jobs())
    if (js.first == prefix) {
      seen = true;
      EXPECT_EQ(js.second, "CANCELLED") << id;
    }
  EXPECT_TRUE(seen) << "trial 1 ran as a Slurm job";
}

}  // namespace
}  // namespace soartune::daemon
