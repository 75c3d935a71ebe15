#include "daemon/executor_slurm.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/output_lines.h"

namespace soartune::daemon {

namespace fs = std::filesystem;

namespace {

// The files of trial `t` in its work dir, named after its trial file (trial-0003.yaml -> trial-0003.out, ...).
struct TrialFiles {
  std::string script, out, err, exit, slurm_log;
  explicit TrialFiles(const TrialLaunch& t) {
    std::string stem = t.trial_file;
    if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".yaml") == 0) stem.resize(stem.size() - 5);
    script = stem + ".sbatch";
    out = stem + ".out";
    err = stem + ".err";
    exit = stem + ".exit";
    slurm_log = stem + ".slurm.log";
  }
};

// Single-quoted for /bin/sh.
std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

// The last `cap` bytes of a file.
std::string read_tail(const std::string& path, size_t cap) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const auto size = static_cast<uint64_t>(std::max<std::streamoff>(in.tellg(), 0));
  const uint64_t n = std::min<uint64_t>(size, cap);
  std::string s(n, '\0');
  in.seekg(static_cast<std::streamoff>(size - n));
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return s;
}

// The worker's stdout file as run_process would have kept it from a pipe (ProcessSpec's caps): whole up to
// max_stdout_bytes; past that its head and its last stdout_tail_bytes, where the result line is.
void read_stdout(const std::string& path, ProcessResult& p) {
  const ProcessSpec caps;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return;
  const auto size = static_cast<uint64_t>(std::max<std::streamoff>(in.tellg(), 0));
  p.stdout_bytes = size;
  p.out.resize(static_cast<size_t>(std::min<uint64_t>(size, caps.max_stdout_bytes)));
  in.seekg(0);
  in.read(p.out.data(), static_cast<std::streamsize>(p.out.size()));
  p.out.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  if (size <= caps.max_stdout_bytes) return;
  p.stdout_truncated = true;
  p.out_tail = read_tail(path, static_cast<size_t>(std::min<uint64_t>(size - caps.max_stdout_bytes, caps.stdout_tail_bytes)));
}

// Feeds what the worker's stdout file gained since `offset` to `lines` (at most `budget` bytes a call, so one poll
// never reads without bound), and advances `offset`.
void follow(const std::string& path, uint64_t& offset, OutputLines& lines, uint64_t budget = 4u << 20) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(static_cast<std::streamoff>(offset));
  char chunk[65536];
  while (budget > 0 && in) {
    in.read(chunk, static_cast<std::streamsize>(std::min<uint64_t>(sizeof chunk, budget)));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    lines.feed(chunk, static_cast<size_t>(got));
    offset += static_cast<uint64_t>(got);
    budget -= static_cast<uint64_t>(got);
  }
}

// sbatch, squeue and scancel see what a worker would (plus where Slurm's config is): the job inherits it.
std::vector<std::pair<std::string, std::string>> slurm_env(const TrialLaunch& t) {
  std::vector<std::pair<std::string, std::string>> env = {{"SOARTUNE_DEVICE", t.device}};
  if (const char* conf = std::getenv("SLURM_CONF")) env.emplace_back("SLURM_CONF", conf);
  return env;
}

ProcessResult run_tool(std::vector<std::string> argv, const TrialLaunch& t) {
  ProcessSpec ps;
  ps.argv = std::move(argv);
  ps.env = slurm_env(t);
  ps.timeout_s = 60;
  return run_process(ps);
}

bool tool_ok(const ProcessResult& r) { return r.started && r.exited && r.exit_code == 0; }

std::string tool_error(const std::string& name, const ProcessResult& r) {
  if (!r.started) return name + ": " + r.spawn_error;
  std::string e = name + " failed";
  if (r.exited) e += " (exit " + std::to_string(r.exit_code) + ")";
  std::string last = last_lines(r.err_tail, 2, 400);
  if (!last.empty()) e += ": " + last;
  return e;
}

// Sleeps up to `seconds`, returning early when the trial is cancelled or detached.
void nap(double seconds, const TrialControl& control) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < until && !control.cancel.requested && !control.detach)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

}  // namespace

SlurmState slurm_end_state(std::string_view s) {
  SlurmState st;
  if (s == "COMPLETED" || s == "FAILED") st.read_worker = true;
  else if (s == "CANCELLED") st.cancelled = true;
  else if (s == "TIMEOUT" || s == "DEADLINE") st.failure = FailureKind::kTimeout;
  else if (s == "OUT_OF_MEMORY") st.failure = FailureKind::kOutOfMemory;
  else if (s == "NODE_FAIL" || s == "BOOT_FAIL") st.failure = FailureKind::kNodeFailure;
  else if (s == "PREEMPTED") st.failure = FailureKind::kPreempted;
  else st.in_flight = true;   // PENDING, RUNNING, CONFIGURING, COMPLETING, SUSPENDED, REQUEUED, ...
  return st;
}

std::string SlurmExecutor::tool(const char* name) const {
  if (!cfg_.bin_dir.empty()) return (fs::path(cfg_.bin_dir) / name).string();
  // Processes are started without a PATH search: find the tool the way a shell would.
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    fs::path candidate = fs::path(dirs.substr(start, end - start)) / name;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return name;
}

ExecutorOutcome SlurmExecutor::run(const TrialLaunch& t, TrialControl& control,
                                   const std::function<void(int64_t)>& submitted) {
  ExecutorOutcome o;
  TrialFiles f(t);
  for (const std::string& p : {f.out, f.err, f.exit, f.exit + ".part", f.slurm_log}) std::remove(p.c_str());
  {
    // The exit status goes to its own file, renamed into place, so "the file is there" means "the worker ended":
    // the daemon can read it even after Slurm has forgotten the job. A shell reports death by signal n as 128+n.
    std::ofstream s(f.script);
    s << "#!/bin/sh\n"
      << "# soartune job " << t.job_id << ", trial " << t.number << "\n"
      << sh_quote(worker_) << " --trial " << sh_quote(t.trial_file) << " --progress >" << sh_quote(f.out) << " 2>"
      << sh_quote(f.err) << "\n"
      << "echo $? >" << sh_quote(f.exit + ".part") << " && mv " << sh_quote(f.exit + ".part") << " "
      << sh_quote(f.exit) << "\n";
    if (!s) {
      o.process.spawn_error = "cannot write the batch script " + f.script;
      return o;
    }
  }
  ::chmod(f.script.c_str(), 0755);
  // Slurm's time limit is whole minutes; its TIMEOUT is the trial timeout.
  const int minutes = std::max(1, static_cast<int>(std::ceil(t.timeout_s / 60.0)));
  std::vector<std::string> argv = {tool("sbatch"), "--parsable",
                                   "--job-name=soartune-" + t.job_id + "-" + std::to_string(t.number),
                                   "--chdir=" + t.work_dir, "--output=" + f.slurm_log,
                                   "--time=" + std::to_string(minutes)};
  argv.insert(argv.end(), cfg_.sbatch_args.begin(), cfg_.sbatch_args.end());
  argv.push_back(f.script);
  ProcessResult r = run_tool(argv, t);
  if (!tool_ok(r)) {
    o.process.spawn_error = tool_error("sbatch", r);
    return o;
  }
  // --parsable prints "<job id>" or "<job id>;<cluster>".
  int64_t id = 0;
  try {
    id = std::stoll(r.out.substr(0, r.out.find(';')));
  } catch (const std::exception&) {
    id = 0;
  }
  if (id <= 0) {
    o.process.spawn_error = "sbatch printed no job id: '" + last_lines(r.out, 1, 200) + "'";
    return o;
  }
  spdlog::info("job {} trial {} is Slurm job {}", t.job_id, t.number, id);
  submitted(id);
  return wait(t, id, control);
}

ExecutorOutcome SlurmExecutor::attach(const TrialLaunch& t, int64_t scheduler_job_id, TrialControl& control) {
  spdlog::info("job {} trial {}: re-attached to Slurm job {}", t.job_id, t.number, scheduler_job_id);
  return wait(t, scheduler_job_id, control);
}

ExecutorOutcome SlurmExecutor::wait(const TrialLaunch& t, int64_t id, TrialControl& control) {
  ExecutorOutcome o;
  TrialFiles f(t);
  const std::string sid = std::to_string(id);
  const auto t0 = std::chrono::steady_clock::now();
  bool cancel_sent = false;
  int unknown = 0;
  std::string state;
  uint64_t out_offset = 0;
  OutputLines lines(control.on_stdout_line, ProcessSpec{}.max_line_bytes);
  for (;;) {
    if (control.detach) {
      o.detached = true;
      return o;
    }
    if (control.cancel.requested && !cancel_sent) {
      ProcessResult c = run_tool({tool("scancel"), sid}, t);
      if (!tool_ok(c)) spdlog::warn("job {} trial {}: {}", t.job_id, t.number, tool_error("scancel " + sid, c));
      cancel_sent = true;
    }
    ProcessResult q = run_tool({tool("squeue"), "-h", "--states=all", "-j", sid, "-o", "%T"}, t);
    state = last_lines(q.out, 1, 64);
    while (!state.empty() && (state.back() == ' ' || state.back() == '\n')) state.pop_back();
    const bool forgotten = (q.exited && q.exit_code == 0 && state.empty()) ||
                           q.err_tail.find("Invalid job id") != std::string::npos;
    if (!state.empty() && !slurm_end_state(state).in_flight) break;
    if (forgotten) {
      // Slurm drops ended jobs after MinJobAge: the exit file is then the only word on how it went.
      if (fs::exists(f.exit)) {
        state = "COMPLETED";
        break;
      }
      // Not yet known right after sbatch on a busy controller, or gone for good: give it a few polls.
      if (++unknown >= 5) {
        state.clear();
        break;
      }
    } else if (!tool_ok(q)) {
      spdlog::warn("job {} trial {}: {}; still waiting", t.job_id, t.number, tool_error("squeue", q));
    }
    // The shared directory carries the worker's progress lines: read what is new at each poll.
    if (control.on_stdout_line && !cancel_sent) follow(f.out, out_offset, lines);
    nap(cfg_.poll_s, control);
  }

  ProcessResult& p = o.process;
  p.started = true;
  p.timing_env = timing_environment(slurm_env(t));   // what sbatch ran with, and so the job (it inherits it)
  p.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  read_stdout(f.out, p);
  p.err_tail = read_tail(f.err, ProcessSpec{}.stderr_tail_bytes);
  const std::string slurm_says = last_lines(read_tail(f.slurm_log, 64u << 10), 1, 200);
  if (state.empty()) {
    o.ended_by = FailureKind::kNodeFailure;
    o.reason = "Slurm job " + sid + " is gone from the queue and left no exit status (lost with its node?)";
    return o;
  }
  const SlurmState st = slurm_end_state(state);
  if (st.cancelled) {
    if (cancel_sent) {
      p.cancelled = true;
    } else {
      o.ended_by = FailureKind::kCancelled;
      o.reason = "Slurm job " + sid + " was cancelled outside the daemon (scancel)";
    }
    return o;
  }
  if (st.failure) {
    o.ended_by = st.failure;
    o.reason = "Slurm job " + sid + " ended " + state + (slurm_says.empty() ? "" : ": " + slurm_says);
    return o;
  }
  std::ifstream ex(f.exit);
  int code = -1;
  if (!(ex >> code)) {
    o.ended_by = FailureKind::kExitCode;
    o.reason = "Slurm job " + sid + " ended " + state + " before the worker's exit status was written" +
               (slurm_says.empty() ? "" : ": " + slurm_says);
    return o;
  }
  if (code > 128 && code < 128 + 65) {
    p.term_signal = code - 128;
  } else {
    p.exited = true;
    p.exit_code = code;
  }
  return o;
}

}  // namespace soartune::daemon
