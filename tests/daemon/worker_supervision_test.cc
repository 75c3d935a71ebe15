// Worker supervision: a worker that crashes, hangs, prints garbage or fails gives a FAILED trial with a precise
// reason. The "workers" here are small shell scripts that only simulate those failures; a good result is a
// hand-written JSON document checked by the parser.
#include <signal.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/job_manager.h"
#include "daemon/store.h"
#include "daemon/trial_result.h"
#include "daemon/worker_process.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::TempDir;
using testing::write_file;
using testing::write_script;

ProcessResult run_script(const TempDir& dir, const std::string& body, double timeout_s = 10, double grace_s = 1) {
  ProcessSpec ps;
  ps.argv = {write_script(dir.file("w.sh"), body)};
  ps.timeout_s = timeout_s;
  ps.kill_grace_s = grace_s;
  return run_process(ps);
}

TrialOutcome interpret(const ProcessResult& r, TrialRecord& t, double timeout_s = 10) {
  return interpret_worker_run(r, timeout_s, t);
}

const char* kGoodResult = R"({"ok": true, "backend": "cpu", "device": "cpu: 2 threads", "engine_build": "0.1.0+abc",
 "tiers": [{"tier": "c1", "concurrency": 1, "duration_s": 1.5, "ttft_ms": {"p50": 1, "p90": 2, "p99": 3},
            "tpot_ms": {"p50": 4, "p90": 5, "p99": 6}, "output_tokens_per_s": 100},
           {"tier": "c8", "concurrency": 8, "duration_s": 0.5},
           {"tier": "cinf", "concurrency": 0, "duration_s": 0.25}],
 "accuracy": {"metric": "fidelity", "relative_pct": 98.5}, "peak_memory_bytes": 1234})";

TEST(WorkerProcess, CapturesStdoutAndExitCode) {
  TempDir d;
  ProcessResult r = run_script(d, "echo hello; echo oops >&2; exit 3");
  ASSERT_TRUE(r.started);
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "hello\n");
  EXPECT_EQ(r.err_tail, "oops\n");
}

// The worker inherits only what it needs to start and the timing variables it records; a switch in the
// daemon's environment cannot change a trial without being stored with it.
TEST(WorkerProcess, WorkerSeesOnlyTheAllowlistedEnvironment) {
  TempDir d;
  ::setenv("SOARTUNE_EXPERIMENT_SWITCH", "1", 1);
  ::setenv("OMP_NUM_THREADS", "3", 1);
  ProcessSpec ps;
  ps.argv = {write_script(d.file("w.sh"),
                          "echo \"switch=${SOARTUNE_EXPERIMENT_SWITCH:-unset} omp=${OMP_NUM_THREADS:-unset} "
                          "dev=${CUDA_VISIBLE_DEVICES:-unset} path=${PATH:+set}\"")};
  ps.env = {{"CUDA_VISIBLE_DEVICES", "2"}};
  ProcessResult r = run_process(ps);
  ::unsetenv("SOARTUNE_EXPERIMENT_SWITCH");
  ::unsetenv("OMP_NUM_THREADS");
  ASSERT_TRUE(r.started);
  EXPECT_EQ(r.out, "switch=unset omp=3 dev=2 path=set\n");
}

// A worker runs with its memory capped and core dumps off, from its first instruction (the limits are set
// before exec); an allocation beyond the cap fails inside the worker, not on the machine.
TEST(WorkerProcess, WorkerRunsUnderTheAddressSpaceCapWithoutCoreDumps) {
  TempDir d;
  ProcessSpec ps;
  ps.argv = {write_script(d.file("w.sh"), "echo \"as=$(ulimit -v) core=$(ulimit -c)\"")};
  ps.address_space_limit_bytes = 512ull << 20;
  ProcessResult r = run_process(ps);
  ASSERT_TRUE(r.started) << r.spawn_error;
  EXPECT_EQ(r.out, "as=524288 core=0\n");

  ps.argv = {write_script(d.file("big.sh"), "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo survived ${#x}")};
  ps.address_space_limit_bytes = 128ull << 20;
  r = run_process(ps);
  ASSERT_TRUE(r.started);
  EXPECT_EQ(r.out.find("survived 400000000"), std::string::npos) << r.out;
  EXPECT_FALSE(r.exited && r.exit_code == 0 && r.out.find("survived") != std::string::npos);
}

TEST(WorkerProcess, MissingProgramIsReported) {
  ProcessSpec ps;
  ps.argv = {"/nonexistent/soartune-worker"};
  ProcessResult r = run_process(ps);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.spawn_error.find("/nonexistent/soartune-worker"), std::string::npos);
  TrialRecord t;
  TrialOutcome o = interpret(r, t);
  EXPECT_EQ(o.status, TrialStatus::kFailed);
  EXPECT_EQ(o.failure_kind, FailureKind::kNotStarted);
  EXPECT_NE(o.error.find("did not start"), std::string::npos) << o.error;
}

TEST(WorkerProcess, CrashBySignalIsFailedWithTheSignal) {
  TempDir d;
  ProcessResult r = run_script(d, "echo 'loading model' >&2; kill -SEGV $$");
  EXPECT_FALSE(r.exited);
  EXPECT_EQ(r.term_signal, SIGSEGV);
  TrialRecord t;
  TrialOutcome o = interpret(r, t);
  EXPECT_EQ(o.status, TrialStatus::kFailed);
  EXPECT_EQ(o.failure_kind, FailureKind::kCrash);
  EXPECT_EQ(o.failure_code, SIGSEGV);
  EXPECT_EQ(t.failure_kind, FailureKind::kCrash);
  EXPECT_NE(o.error.find("SIGSEGV"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("loading model"), std::string::npos) << o.error;
  EXPECT_EQ(t.log_tail, "loading model");
}

TEST(WorkerProcess, KilledBySigkillLooksLikeOutOfMemory) {
  TempDir d;
  TrialRecord t;
  TrialOutcome o = interpret(run_script(d, "kill -KILL $$"), t);
  EXPECT_EQ(o.status, TrialStatus::kFailed);
  EXPECT_EQ(o.failure_kind, FailureKind::kOutOfMemory);
  EXPECT_NE(o.error.find("SIGKILL"), std::string::npos) << o.error;
}

TEST(WorkerProcess, HangIsKilledAtTheTimeout) {
  TempDir d;
  auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = run_script(d, "sleep 30", 0.5);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(s, 10);
  TrialRecord t;
  TrialOutcome o = interpret(r, t, 0.5);
  EXPECT_EQ(o.status, TrialStatus::kFailed);
  EXPECT_EQ(o.failure_kind, FailureKind::kTimeout);
  EXPECT_EQ(o.error.rfind("timeout", 0), 0u) << o.error;
}

TEST(WorkerProcess, WorkerIgnoringSigtermGetsSigkill) {
  TempDir d;
  ProcessResult r = run_script(d, "trap '' TERM; while true; do sleep 0.1; done", 0.3, 0.3);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.exited);
  EXPECT_EQ(r.term_signal, SIGKILL);
}

TEST(WorkerProcess, ChildrenOfTheWorkerDieWithIt) {
  TempDir d;
  std::string pidfile = d.file("child.pid");
  ProcessResult r = run_script(d, "sleep 30 & echo $! > " + pidfile + "; wait", 0.3);
  EXPECT_TRUE(r.timed_out);
  std::ifstream in(pidfile);
  pid_t child = 0;
  in >> child;
  ASSERT_GT(child, 0);
  // Gone, or a zombie waiting for init to reap it.
  char state = 'Z';
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string pid_s, comm;
    state = 'Z';
    if (stat >> pid_s >> comm >> state) {
      if (state == 'Z') break;
    } else {
      break;
    }
  }
  EXPECT_EQ(state, 'Z') << "the worker's child survived";
}

TEST(WorkerProcess, CancelStopsTheWorker) {
  TempDir d;
  ProcessSpec ps;
  ps.argv = {write_script(d.file("w.sh"), "sleep 30")};
  ps.timeout_s = 60;
  CancelFlag cancel;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel.cancel();
  });
  ProcessResult r = run_process(ps, &cancel);
  t.join();
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(r.timed_out);
  TrialRecord rec;
  EXPECT_EQ(interpret(r, rec).status, TrialStatus::kCancelled);
  EXPECT_EQ(rec.failure_kind, FailureKind::kCancelled);
}

TEST(WorkerProcess, GarbageOutputIsFailed) {
  TempDir d;
  TrialRecord t;
  TrialOutcome o = interpret(run_script(d, "echo 'this is not json'"), t);
  EXPECT_EQ(o.status, TrialStatus::kFailed);
  EXPECT_NE(o.error.find("garbage output"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("this is not json"), std::string::npos) << o.error;
  TrialRecord t2;
  TrialOutcome empty = interpret(run_script(d, "true"), t2);
  EXPECT_EQ(empty.status, TrialStatus::kFailed);
  EXPECT_NE(empty.error.find("printed nothing"), std::string::npos) << empty.error;
}

TEST(WorkerProcess, JsonErrorOfABadConfigIsTheReason) {
  TempDir d;
  TrialRecord t;
  TrialOutcome o = interpret(
      run_script(d, R"(echo '{"ok": false, "error": {"field": "launch.kv_cache_dtype", "message": "fp9 is not one of bf16"}}'; exit 2)"),
      t);
  EXPECT_EQ(o.status, TrialStatus::kFailed);
  EXPECT_EQ(o.failure_kind, FailureKind::kInvalidConfig);
  EXPECT_EQ(o.error, "worker exit code 2: launch.kv_cache_dtype: fp9 is not one of bf16");
}

TEST(WorkerProcess, OutOfMemoryErrorIsClassified) {
  TempDir d;
  TrialRecord t;
  TrialOutcome o =
      interpret(run_script(d, R"(echo '{"ok": false, "error": {"kind": "out_of_memory", "message": "cudaMalloc: out of device memory"}}'; exit 1)"), t);
  EXPECT_EQ(o.failure_kind, FailureKind::kOutOfMemory);
  EXPECT_NE(o.error.find("worker exit code 1"), std::string::npos);
}

TEST(WorkerProcess, NonZeroExitWithoutJsonNamesTheLastStderrLine) {
  TempDir d;
  TrialRecord t;
  TrialOutcome o = interpret(run_script(d, "echo first >&2; echo 'engine: bad weights' >&2; exit 7"), t);
  EXPECT_EQ(o.failure_kind, FailureKind::kExitCode);
  EXPECT_EQ(o.failure_code, 7);
  EXPECT_NE(o.error.find("engine: bad weights"), std::string::npos) << o.error;
}

TEST(WorkerProcess, LogTailKeepsTheLastLines) {
  TempDir d;
  TrialRecord t;
  interpret(run_script(d, "i=0; while [ $i -lt 100 ]; do i=$((i+1)); echo line$i >&2; done; exit 1"), t);
  EXPECT_EQ(t.log_tail.rfind("line61\n", 0), 0u) << t.log_tail.substr(0, 20);
  EXPECT_EQ(t.log_tail.substr(t.log_tail.size() - 7), "line100");
}

TEST(TrialResult, GoodResultGivesMetrics) {
  TempDir d;
  write_file(d.file("r.json"), kGoodResult);
  TrialRecord t;
  TrialOutcome o = interpret(run_script(d, "echo 'a log line first'; cat " + d.file("r.json")), t);
  ASSERT_EQ(o.status, TrialStatus::kComplete) << o.error;
  ASSERT_EQ(t.tiers.size(), 3u);
  EXPECT_DOUBLE_EQ(t.tiers[0].duration_s, 1.5);
  EXPECT_DOUBLE_EQ(t.tiers[0].tpot_p99_ms, 6);
  EXPECT_EQ(t.tiers[2].tier, "cinf");
  EXPECT_DOUBLE_EQ(t.relative_accuracy, 98.5);
  EXPECT_EQ(t.accuracy_metric, "fidelity");
  EXPECT_EQ(t.engine_build, "0.1.0+abc");
  EXPECT_EQ(t.peak_memory_bytes, 1234);
  search::TrialMetrics m = metrics_of(t);
  EXPECT_DOUBLE_EQ(m.duration_s[1], 0.5);
}

TEST(TrialResult, MissingTierIsABadResult) {
  TempDir d;
  std::string doc = kGoodResult;
  doc.replace(doc.find("\"cinf\""), 6, "\"c64\"");
  write_file(d.file("r.json"), doc);
  TrialRecord t;
  TrialOutcome o = interpret(run_script(d, "cat " + d.file("r.json")), t);
  EXPECT_EQ(o.status, TrialStatus::kFailed);
  EXPECT_EQ(o.error, "bad worker result: tier cinf missing");
}

// Where the worker's time went is kept from any result it printed (as the peak memory is): a COMPLETE trial's,
// and a FAILED one's whose result was read; without a result there is nothing to keep.
TEST(TrialResult, TimingsAreKeptFromAnyResultRead) {
  TempDir d;
  std::string doc = kGoodResult;
  doc.insert(doc.rfind('}'), R"(, "quantization": {"method": "rtn", "seconds": 0.75},
 "timings_s": {"load": 5.5, "weights": 1.25, "prepare": 2.5, "accuracy": 0.5, "tiers": 2.25})");
  write_file(d.file("r.json"), doc);
  TrialRecord t;
  ASSERT_EQ(interpret(run_script(d, "cat " + d.file("r.json")), t).status, TrialStatus::kComplete);
  EXPECT_DOUBLE_EQ(t.timings.load_s, 5.5);
  EXPECT_DOUBLE_EQ(t.timings.weights_s, 1.25);
  EXPECT_DOUBLE_EQ(t.timings.prepare_s, 2.5);
  EXPECT_DOUBLE_EQ(t.timings.quantize_s, 0.75);
  EXPECT_DOUBLE_EQ(t.timings.accuracy_s, 0.5);
  EXPECT_DOUBLE_EQ(t.timings.tiers_s, 2.25);

  doc.replace(doc.find("\"cinf\""), 6, "\"c64\"");
  write_file(d.file("r.json"), doc);
  TrialRecord failed;
  ASSERT_EQ(interpret(run_script(d, "cat " + d.file("r.json")), failed).status, TrialStatus::kFailed);
  EXPECT_DOUBLE_EQ(failed.timings.load_s, 5.5);
  EXPECT_DOUBLE_EQ(failed.timings.tiers_s, 2.25);

  TrialRecord crashed;
  ASSERT_EQ(interpret(run_script(d, "kill -SEGV $$"), crashed).status, TrialStatus::kFailed);
  EXPECT_EQ(crashed.timings.load_s, 0);
  EXPECT_EQ(crashed.timings.tiers_s, 0);
}

// Worker output is untrusted: a field of the wrong type is a FAILED trial naming the field, never an exception.
TEST(TrialResult, WrongTypesAreBadOutputNamingTheField) {
  TempDir d;
  struct Case { std::string doc, field; };
  for (const Case& c : {Case{R"({"ok": 1})", "ok: expected a boolean, got number"},
                        Case{R"({"ok": "yes"})", "ok: expected a boolean, got string"},
                        Case{R"({"ok": true, "tiers": [{"tier": "c1", "duration_s": "1.5"}], "accuracy": {"relative_pct": 99}})",
                             "tiers[0].duration_s: expected a number, got string"},
                        Case{R"({"ok": true, "tiers": [], "accuracy": []})", "accuracy: expected an object, got array"},
                        Case{R"({"ok": false, "error": {"kind": 3}})", "error.kind: expected a string, got number"},
                        Case{R"({"ok": true, "plans": [{"op": "gemv", "choice": {"variant": 4}}]})",
                             "plans[0].choice.variant: expected a string, got number"}}) {
    write_file(d.file("r.json"), c.doc);
    TrialRecord t;
    TrialOutcome o = interpret(run_script(d, "cat " + d.file("r.json")), t);
    EXPECT_EQ(o.status, TrialStatus::kFailed) << c.doc;
    EXPECT_EQ(o.failure_kind, FailureKind::kBadOutput) << c.doc;
    EXPECT_EQ(o.error, "bad worker result: " + c.field) << c.doc;
  }
}

// Bytes that are not UTF-8 never reach the store: the log tail and the reason are repaired, and a cut keeps
// multi-byte characters whole.
TEST(TrialResult, TextIsValidUtf8) {
  TempDir d;
  TrialRecord t;
  TrialOutcome o = interpret(run_script(d, R"(printf 'bad \377\376 bytes\n' >&2; printf 'caf\303\251\n' >&2; exit 5)"), t);
  EXPECT_EQ(o.failure_kind, FailureKind::kExitCode);
  EXPECT_EQ(t.log_tail, "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes\ncaf\xC3\xA9");
  EXPECT_EQ(o.error, "worker exit code 5; last stderr line: caf\xC3\xA9");
  EXPECT_EQ(last_lines("caf\xC3\xA9", 1, 1), "");
  EXPECT_EQ(last_lines("caf\xC3\xA9", 1, 2), "\xC3\xA9");
}

// A worker that logs more than the 16 MiB stdout cap (19 MB) before its result: the result line, printed last, is still
// read from the kept tail and the log says the output was cut; without a result line the reason says plainly that
// the output was truncated at the cap, not just that it was garbage.
TEST(TrialResult, OutputPastTheSixteenMegabyteCapIsSaidToBeTruncated) {
  TempDir d;
  write_file(d.file("r.json"), kGoodResult);
  const std::string log_19mb = "yes 'engine: a log line on stdout' | head -c 19000000; echo; ";
  TrialRecord good;
  ProcessResult run = run_script(d, log_19mb + "tr -d '\\n' < " + d.file("r.json") + "; echo", 30);
  EXPECT_TRUE(run.stdout_truncated);
  EXPECT_EQ(run.out.size(), 16u << 20);
  TrialOutcome o = interpret(run, good);
  ASSERT_EQ(o.status, TrialStatus::kComplete) << o.error;
  EXPECT_DOUBLE_EQ(good.tiers[0].duration_s, 1.5);
  EXPECT_NE(good.log_tail.find("soartuned: worker output truncated: stdout was 19000"), std::string::npos) << good.log_tail;
  EXPECT_NE(good.log_tail.find("past its cap of 16 MiB"), std::string::npos) << good.log_tail;

  TrialRecord bad;
  TrialOutcome no_result = interpret(run_script(d, log_19mb + "echo '{\"ok\": true, \"tiers\": ['", 30), bad);
  EXPECT_EQ(no_result.status, TrialStatus::kFailed);
  EXPECT_EQ(no_result.failure_kind, FailureKind::kBadOutput);
  EXPECT_EQ(no_result.error.rfind("worker output truncated: stdout was 19000", 0), 0u) << no_result.error;
  EXPECT_NE(no_result.error.find("past its cap of 16 MiB; only the first 16 MiB and the last 1 MiB were kept, and "
                                 "the last holds no complete result line"),
            std::string::npos) << no_result.error;
}

// Plans the worker reports come through typed; the environment recorded with the trial is the one the daemon
// started the worker with, whatever the worker says of it.
TEST(TrialResult, PlansAreKeptAndTheEnvironmentIsTheDaemons) {
  TempDir d;
  std::string doc = kGoodResult;
  doc.insert(doc.size() - 1, R"(, "plans": [{"op": "gemv", "shape": "m1 n64 k64", "choice": {"variant": "m1w8u2b4"}}],)"
                             R"( "env": {"CUDA_VISIBLE_DEVICES": "7"})");
  write_file(d.file("r.json"), doc);
  ProcessSpec ps;
  ps.argv = {"/bin/sh", "-c", "cat " + d.file("r.json")};
  ps.env = {{"CUDA_VISIBLE_DEVICES", "3"}, {"SOARTUNE_EXPERIMENT_SWITCH", "1"}};
  const ProcessResult run = run_process(ps);
  EXPECT_EQ(run.timing_env.at("CUDA_VISIBLE_DEVICES"), "3");
  EXPECT_EQ(run.timing_env.count("SOARTUNE_EXPERIMENT_SWITCH"), 0u) << "only kTimingEnvironment is recorded";
  TrialRecord t;
  TrialOutcome o = interpret(run, t);
  ASSERT_EQ(o.status, TrialStatus::kComplete) << o.error;
  ASSERT_EQ(t.plans.size(), 1u);
  EXPECT_EQ(t.plans[0].op, "gemv");
  EXPECT_EQ(t.plans[0].shape, "m1 n64 k64");
  EXPECT_EQ(t.plans[0].choice.at("variant"), "m1w8u2b4");
  EXPECT_EQ(t.env.at("CUDA_VISIBLE_DEVICES"), "3");
}

TEST(WorkerProcess, LastLines) {
  EXPECT_EQ(last_lines("a\nb\nc\n", 2, 100), "b\nc");
  EXPECT_EQ(last_lines("abc", 5, 100), "abc");
  EXPECT_EQ(last_lines("", 5, 100), "");
  EXPECT_EQ(last_lines("a\nbcdef", 5, 3), "def");
}

// Through the job runner: a worker that crashes on the reference trial fails the job with that reason.
TEST(JobRunner, CrashingReferenceFailsTheJobWithTheReason) {
  TempDir d;
  DaemonConfig cfg;
  cfg.database = d.file("t.db");
  cfg.work_dir = d.file("work");
  cfg.workloads_dir = d.file("workloads");
  cfg.worker = write_script(d.file("worker.sh"), "echo 'about to crash' >&2; kill -SEGV $$");
  auto store = Store::open(cfg.database);
  ASSERT_TRUE(store.ok()) << store.status().message;
  JobManager jobs(cfg, std::move(store).value());
  ASSERT_TRUE(jobs.start().ok());
  auto job = jobs.submit(
      "model: synthetic:tiny\nworkload: {requests: [{input_len: 4, output_len: 4, count: 1}]}\n"
      "budget: {trials: 3}\nspace: {weight_bits: {type: choice, values: [16, 8]}}\n");
  ASSERT_TRUE(job.ok()) << job.status().message;
  JobView v;
  for (int i = 0; i < 200; ++i) {
    v = jobs.get_job(job.value().job.id).value();
    if (is_terminal(v.job.state)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(v.job.state, JobState::kFailed);
  EXPECT_NE(v.job.error.find("reference trial 0 failed: worker crashed: killed by SIGSEGV"), std::string::npos)
      << v.job.error;
  auto trials = jobs.trials(job.value().job.id).value();
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].status, TrialStatus::kFailed);
  EXPECT_EQ(trials[0].log_tail, "about to crash");
  EXPECT_EQ(trials[0].device, "cpu");
}

// Every fault a worker can show, through the runner: each trial's failure kind is computed once, kept as a
// value in the store (read back after the daemon is gone) and handed to the search as a value.
TEST(JobRunner, EachWorkerFaultIsStoredAsItsKind) {
  TempDir d;
  write_file(d.file("ok.json"), kGoodResult);
  DaemonConfig cfg;
  cfg.database = d.file("t.db");
  cfg.work_dir = d.file("work");
  cfg.workloads_dir = d.file("workloads");
  // Trial N's behaviour by its file name (argv: --trial .../trial-000N.yaml).
  cfg.worker = write_script(d.file("worker.sh"),
      "case \"$2\" in\n"
      "  *trial-0000.yaml) cat " + d.file("ok.json") + " ;;\n"
      "  *trial-0001.yaml) kill -SEGV $$ ;;\n"
      "  *trial-0002.yaml) kill -KILL $$ ;;\n"
      "  *trial-0003.yaml) sleep 30 ;;\n"
      "  *trial-0004.yaml) echo 'engine: bad weights' >&2; exit 7 ;;\n"
      "  *trial-0005.yaml) echo 'this is not json' ;;\n"
      "  *trial-0006.yaml) echo '{\"ok\": false, \"error\": {\"kind\": \"invalid_config\", \"field\": \"launch.x\", \"message\": \"no\"}}'; exit 2 ;;\n"
      "  *trial-0007.yaml) echo '{\"ok\": false, \"error\": {\"kind\": \"out_of_memory\", \"message\": \"cudaMalloc\"}}'; exit 1 ;;\n"
      "  *trial-0008.yaml) echo '{\"ok\": 1}' ;;\n"
      "  *trial-0009.yaml) echo '{\"ok\": false, \"error\": {\"kind\": \"worker_error\", \"message\": \"lost\"}}'; exit 1 ;;\n"
      "esac");
  const std::vector<std::pair<FailureKind, int>> want = {
      {FailureKind::kNone, 0},        {FailureKind::kCrash, SIGSEGV},      {FailureKind::kOutOfMemory, SIGKILL},
      {FailureKind::kTimeout, 0},     {FailureKind::kExitCode, 7},         {FailureKind::kBadOutput, 0},
      {FailureKind::kInvalidConfig, 2}, {FailureKind::kOutOfMemory, 1},    {FailureKind::kBadOutput, 0},
      {FailureKind::kWorkerError, 1}};
  std::string id;
  {
    JobManager jobs(cfg, Store::open(cfg.database).value());
    ASSERT_TRUE(jobs.start().ok());
    auto job = jobs.submit(
        "model: synthetic:tiny\nstrategy: random\nworkload: {requests: [{input_len: 4, output_len: 4, count: 1}]}\n"
        "trial_timeout_s: 1\nbudget: {trials: 10}\nspace: {max_running_requests: {type: int, low: 1, high: 64}}\n");
    ASSERT_TRUE(job.ok()) << job.status().message;
    id = job.value().job.id;
    JobView v;
    for (int i = 0; i < 600; ++i) {
      v = jobs.get_job(id).value();
      if (is_terminal(v.job.state)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(v.job.state, JobState::kSucceeded) << v.job.error;
    // What the search is told.
    auto st = jobs.search_state(id);
    ASSERT_TRUE(st.ok());
    ASSERT_EQ(st.value().history.size(), want.size());
    for (size_t i = 1; i < want.size(); ++i) {
      EXPECT_EQ(st.value().history[i].outcome, search::Outcome::kFailed) << i;
      EXPECT_EQ(st.value().history[i].failure, want[i].first) << i;
    }
    jobs.shutdown();
  }
  // What the store kept, read back by a fresh store.
  auto store = Store::open(cfg.database);
  ASSERT_TRUE(store.ok());
  TrialQuery q;
  q.job_id = id;
  q.limit = 0;
  std::vector<TrialRecord> ts = store.value()->list_trials(q);
  ASSERT_EQ(ts.size(), want.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(ts[i].failure_kind, want[i].first) << i << ": " << ts[i].error;
    if (want[i].first == FailureKind::kCrash || want[i].first == FailureKind::kExitCode)
      EXPECT_EQ(ts[i].failure_code, want[i].second) << i;
    EXPECT_EQ(ts[i].is_reference, i == 0) << i;
  }
}

// Nothing is written for a spec that does not validate.
TEST(JobRunner, BadSpecWritesNothing) {
  TempDir d;
  DaemonConfig cfg;
  cfg.database = d.file("t.db");
  cfg.work_dir = d.file("work");
  cfg.workloads_dir = d.file("workloads");
  cfg.worker = "/nonexistent";
  JobManager jobs(cfg, Store::open(cfg.database).value());
  auto r = jobs.submit("model: synthetic:tiny\nworkload: nope\nspace: {weight_bits: {type: bool}}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code, soartune::Code::kInvalidArgument);
  EXPECT_TRUE(jobs.list_jobs(10, 0).empty());
  EXPECT_FALSE(std::filesystem::exists(cfg.work_dir));
}

}  // namespace
}  // namespace soartune::daemon
