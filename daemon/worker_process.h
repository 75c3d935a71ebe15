// Supervision of one child process (a soartune-worker running one trial): spawned in its own process group,
// stdout captured whole up to a cap (past it, its head and its tail), the tail of stderr kept, a wall-clock timeout (SIGTERM to the group, then SIGKILL
// after a grace period), and cancellation from another thread. Nothing here knows what a trial is; the
// interpretation of the worker's output lives in trial_result.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace soartune::daemon {

struct ProcessSpec {
  std::vector<std::string> argv;                              // argv[0] is the program path
  std::vector<std::pair<std::string, std::string>> env;      // set on top of the daemon's environment
  std::string cwd;                                            // empty: the daemon's
  double timeout_s = 300;                                     // <= 0: no timeout
  double kill_grace_s = 3;                                    // between SIGTERM and SIGKILL
  size_t max_stdout_bytes = 16u << 20;                        // beyond this stdout is truncated ...
  size_t stdout_tail_bytes = 1u << 20;                        // ... and only its last bytes kept beside the head
  size_t stderr_tail_bytes = 64u << 10;
  uint64_t address_space_limit_bytes = 0;                      // RLIMIT_AS of the child; 0: none. Core dumps: off
  // Called on the calling thread with each line of stdout (no newline, at most max_line_bytes; longer ones are
  // dropped) as it arrives, while the child runs; unset: stdout is only kept. Independent of the caps above.
  std::function<void(std::string_view line)> on_stdout_line;
  size_t max_line_bytes = 64u << 10;
};

struct ProcessResult {
  bool started = false;
  std::string spawn_error;         // why it could not be started
  bool exited = false;             // exited normally (exit_code valid)
  int exit_code = -1;
  int term_signal = 0;             // the signal that ended it, when it did not exit normally
  bool timed_out = false;          // we killed it: the timeout passed
  bool cancelled = false;          // we killed it: cancelled
  bool stdout_truncated = false;   // stdout passed max_stdout_bytes
  uint64_t stdout_bytes = 0;       // all the child wrote to stdout
  std::string out;                 // stdout, its first max_stdout_bytes
  std::string out_tail;            // when truncated: the last stdout_tail_bytes after the first max_stdout_bytes
  std::string err_tail;            // the last stderr_tail_bytes of stderr
  double wall_s = 0;
  // The variables of kTimingEnvironment the child was started with: recorded with the trial as facts about the
  // run (the worker reads no environment).
  std::map<std::string, std::string> timing_env;
};

// Set from any thread to make run_process kill the child (SIGTERM, then SIGKILL) and return.
struct CancelFlag {
  std::atomic<bool> requested{false};
  void cancel() { requested.store(true); }
};

// The kTimingEnvironment variables a child started with `extra` on top of the daemon's environment sees.
std::map<std::string, std::string> timing_environment(const std::vector<std::pair<std::string, std::string>>& extra);

// Runs the process to completion. Blocks the calling thread. Signals the daemon blocks or ignores are reset to
// their defaults in the child.
ProcessResult run_process(const ProcessSpec& spec, const CancelFlag* cancel = nullptr);

// "SIGSEGV", "SIGKILL", ... ("signal 42" when unnamed).
std::string signal_name(int sig);
// The last `max_lines` lines of `text`, at most `max_bytes` long.
std::string last_lines(const std::string& text, int max_lines, size_t max_bytes);

}  // namespace soartune::daemon
