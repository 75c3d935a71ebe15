#include "daemon/worker_process.h"

#include "core/worker_result.h"

#include "core/utf8.h"
#include "daemon/output_lines.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

extern char** environ;

namespace soartune::daemon {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Keeps `n` bytes of stderr: its last `cap` bytes.
void keep_tail(std::string& buf, const char* p, size_t n, size_t cap) {
  buf.append(p, n);
  if (buf.size() > cap) buf.erase(0, buf.size() - cap);
}

// Keeps `n` bytes of stdout: the first max_stdout_bytes whole, after that only the last stdout_tail_bytes, where a
// worker that logged too much still leaves its result line (printed last).
void keep_stdout(ProcessResult& r, const ProcessSpec& spec, const char* p, size_t n) {
  r.stdout_bytes += n;
  const size_t room = r.out.size() < spec.max_stdout_bytes ? spec.max_stdout_bytes - r.out.size() : 0;
  const size_t take = std::min(room, n);
  r.out.append(p, take);
  if (take == n) return;
  r.stdout_truncated = true;
  keep_tail(r.out_tail, p + take, n - take, spec.stdout_tail_bytes);
}

// Drains what is readable from `fd` into `sink`; returns false at EOF or error.
template <typename Sink>
bool drain(int fd, Sink&& sink) {
  char chunk[65536];
  ssize_t n = ::read(fd, chunk, sizeof chunk);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  sink(chunk, static_cast<size_t>(n));
  return true;
}

// A worker sees only the variables it needs to start (kWorkerBaseEnvironment) and those it records with its
// result because they change timings (kTimingEnvironment), plus what the spec sets: nothing else in the daemon's
// environment can change what a trial measures without being stored with it.
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& extra) {
  auto passes = [](const std::string& name) {
    for (const char* n : kWorkerBaseEnvironment)
      if (name == n) return true;
    for (const char* n : kTimingEnvironment)
      if (name == n) return true;
    return false;
  };
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    if (passes(name)) env[name] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

std::map<std::string, std::string> timing_environment(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : child_environment(extra)) {
    const std::string name = kv.substr(0, kv.find('='));
    for (const char* n : kTimingEnvironment)
      if (name == n) out[name] = kv.substr(name.size() + 1);
  }
  return out;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGINT: return "SIGINT";
    case SIGPIPE: return "SIGPIPE";
    case SIGHUP: return "SIGHUP";
    case SIGTRAP: return "SIGTRAP";
    default: return "signal " + std::to_string(sig);
  }
}

std::string last_lines(const std::string& text, int max_lines, size_t max_bytes) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) --end;
  size_t start = end;
  int lines = 0;
  while (start > 0 && lines < max_lines) {
    size_t nl = text.rfind('\n', start - 1);
    if (nl == std::string::npos) {
      start = 0;
      break;
    }
    start = nl;
    ++lines;
  }
  if (start < end && text[start] == '\n') ++start;
  std::string out = text.substr(start, end - start);
  // Cut on a character boundary, so a multi-byte character is kept whole or not at all.
  if (out.size() > max_bytes) out = std::string(soartune::utf8_suffix(out, max_bytes));
  return out;
}

ProcessResult run_process(const ProcessSpec& spec, const CancelFlag* cancel) {
  ProcessResult r;
  if (spec.argv.empty()) {
    r.spawn_error = "no program given";
    return r;
  }
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    r.spawn_error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    r.spawn_error = std::string("pipe: ") + std::strerror(errno);
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return r;
  }

  std::vector<std::string> env_strings = child_environment(spec.env);
  r.timing_env = timing_environment(spec.env);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  // fork + exec rather than posix_spawn: resource limits can only be set between the two, and a limit set on
  // the running child afterwards would leave a window in which it runs unlimited. Between fork and exec the
  // child makes async-signal-safe calls only (the daemon has threads). Its errno comes back through a
  // close-on-exec pipe: nothing read means exec succeeded.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    r.spawn_error = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return r;
  }
  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  const rlim_t as_limit = spec.address_space_limit_bytes > 0 ? static_cast<rlim_t>(spec.address_space_limit_bytes)
                                                             : RLIM_INFINITY;
  auto t0 = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    auto die = [&](int err) {
      ssize_t ignored = ::write(report[1], &err, sizeof err);
      (void)ignored;
      ::_exit(127);
    };
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(out_pipe[1], 1) < 0 || ::dup2(err_pipe[1], 2) < 0) die(errno);
    if (cwd && ::chdir(cwd) != 0) die(errno);
    ::setpgid(0, 0);   // its own process group, so a timeout kills its children too
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig)
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const struct rlimit no_core {0, 0};
    if (::setrlimit(RLIMIT_CORE, &no_core) != 0) die(errno);   // a crashing worker leaves no core file
    if (as_limit != RLIM_INFINITY) {
      const struct rlimit as {as_limit, as_limit};
      if (::setrlimit(RLIMIT_AS, &as) != 0) die(errno);
    }
    ::execve(argv[0], argv.data(), envp.data());
    die(errno);
  }
  const int fork_errno = errno;
  ::close(report[1]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  int child_errno = 0;
  ssize_t got = pid > 0 ? ::read(report[0], &child_errno, sizeof child_errno) : 0;
  while (got < 0 && errno == EINTR) got = ::read(report[0], &child_errno, sizeof child_errno);
  ::close(report[0]);
  if (pid < 0 || got > 0) {
    if (pid > 0) ::waitpid(pid, nullptr, 0);
    r.spawn_error = "cannot start " + spec.argv[0] + ": " + std::strerror(pid < 0 ? fork_errno : child_errno);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return r;
  }
  r.started = true;

  bool out_open = true, err_open = true;
  OutputLines lines(spec.on_stdout_line, spec.max_line_bytes);
  auto out_sink = [&](const char* p, size_t n) {
    keep_stdout(r, spec, p, n);
    if (spec.on_stdout_line) lines.feed(p, n);
  };
  auto err_sink = [&](const char* p, size_t n) { keep_tail(r.err_tail, p, n, spec.stderr_tail_bytes); };
  bool term_sent = false;
  Clock::time_point term_time;
  int status = 0;
  bool reaped = false;
  auto kill_group = [&](int sig) { ::kill(-pid, sig); };

  while (!reaped) {
    double elapsed = seconds_since(t0);
    if (!term_sent) {
      bool timeout = spec.timeout_s > 0 && elapsed >= spec.timeout_s;
      bool cancelled = cancel && cancel->requested.load();
      if (timeout || cancelled) {
        r.timed_out = timeout && !cancelled;
        r.cancelled = cancelled;
        kill_group(SIGTERM);
        term_sent = true;
        term_time = Clock::now();
      }
    } else if (seconds_since(term_time) >= spec.kill_grace_s) {
      kill_group(SIGKILL);
    }

    if (out_open || err_open) {
      pollfd fds[2];
      int n = 0;
      if (out_open) fds[n++] = {out_pipe[0], POLLIN, 0};
      if (err_open) fds[n++] = {err_pipe[0], POLLIN, 0};
      int pr = ::poll(fds, static_cast<nfds_t>(n), 100);
      if (pr > 0) {
        for (int i = 0; i < n; ++i) {
          if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          if (fds[i].fd == out_pipe[0]) {
            out_open = drain(out_pipe[0], out_sink);
          } else {
            err_open = drain(err_pipe[0], err_sink);
          }
        }
      }
    }
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      reaped = true;
    } else if (w < 0 && errno != EINTR) {
      reaped = true;
      status = 0;
    } else if (!out_open && !err_open) {
      ::usleep(20000);
    }
  }
  // Whatever the child left in its group (a forked helper) goes with it; then pick up what is still buffered.
  ::kill(-pid, SIGKILL);
  auto drain_rest = [&](int fd, bool open, auto& sink) {
    if (!open) return;
    ::fcntl(fd, F_SETFL, O_NONBLOCK);
    char chunk[65536];
    for (;;) {
      ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n <= 0) break;
      sink(chunk, static_cast<size_t>(n));
    }
  };
  drain_rest(out_pipe[0], out_open, out_sink);
  drain_rest(err_pipe[0], err_open, err_sink);
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);

  if (WIFEXITED(status)) {
    r.exited = true;
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.term_signal = WTERMSIG(status);
  }
  r.wall_s = seconds_since(t0);
  return r;
}

}  // namespace soartune::daemon
