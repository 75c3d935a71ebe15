#include "daemon/worker_process.h"

#include "core/worker_result.h"

#include "core/utf8.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
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

// Drains what is readable from `fd` into `buf`; returns false at EOF or error.
bool drain(int fd, std::string& buf, size_t cap, bool keep_tail, bool* truncated) {
  char chunk[65536];
  ssize_t n = ::read(fd, chunk, sizeof chunk);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  if (keep_tail) {
    buf.append(chunk, static_cast<size_t>(n));
    if (buf.size() > cap) buf.erase(0, buf.size() - cap);
  } else {
    size_t room = buf.size() < cap ? cap - buf.size() : 0;
    size_t take = std::min(room, static_cast<size_t>(n));
    buf.append(chunk, take);
    if (take < static_cast<size_t>(n) && truncated) *truncated = true;
  }
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

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  if (!spec.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, spec.cwd.c_str());

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigfillset(&defaults);
  sigdelset(&defaults, SIGKILL);
  sigdelset(&defaults, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);   // its own process group, so a timeout kills its children too
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> env_strings = child_environment(spec.env);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  auto t0 = Clock::now();
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    r.spawn_error = "cannot start " + spec.argv[0] + ": " + std::strerror(rc);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return r;
  }
  r.started = true;

  bool out_open = true, err_open = true;
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
            out_open = drain(out_pipe[0], r.out, spec.max_stdout_bytes, false, &r.stdout_truncated);
          } else {
            err_open = drain(err_pipe[0], r.err_tail, spec.stderr_tail_bytes, true, nullptr);
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
  auto drain_rest = [&](int fd, bool open, std::string& buf, size_t cap, bool tail, bool* trunc) {
    if (!open) return;
    ::fcntl(fd, F_SETFL, O_NONBLOCK);
    char chunk[65536];
    for (;;) {
      ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n <= 0) break;
      if (tail) {
        buf.append(chunk, static_cast<size_t>(n));
        if (buf.size() > cap) buf.erase(0, buf.size() - cap);
      } else {
        size_t room = buf.size() < cap ? cap - buf.size() : 0;
        size_t take = std::min(room, static_cast<size_t>(n));
        buf.append(chunk, take);
        if (take < static_cast<size_t>(n) && trunc) *trunc = true;
      }
    }
  };
  drain_rest(out_pipe[0], out_open, r.out, spec.max_stdout_bytes, false, &r.stdout_truncated);
  drain_rest(err_pipe[0], err_open, r.err_tail, spec.stderr_tail_bytes, true, nullptr);
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
