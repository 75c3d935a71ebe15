// The real soartuned and CLI as processes, for tests that drive them as a user would (security, limits).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/logged_process.h"
#include "daemon/worker_process.h"
#include "test_util.h"

namespace soartune::daemon::testing {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline ProcessResult run(std::vector<std::string> argv, std::vector<std::pair<std::string, std::string>> env = {}) {
  ProcessSpec ps;
  ps.argv = std::move(argv);
  ps.env = std::move(env);
  ps.timeout_s = 120;
  return run_process(ps);
}

class Daemon {
 public:
  Daemon(const TempDir& dir, std::vector<std::string> extra) : dir_(dir), extra_(std::move(extra)) {}
  ~Daemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Starts soartuned; true once it reported its port, false if it exited first (exit status in `status`).
  bool start(std::vector<std::pair<std::string, std::string>> env = {}) {
    std::string port_file = dir_.file("port");
    std::remove(port_file.c_str());
    std::vector<std::string> args = {SOARTUNED_PATH, "--port-file", port_file, "--database", dir_.file("soartune.db"),
                                     "--work-dir", dir_.file("work"), "--workloads-dir",
                                     std::string(SOARTUNE_SOURCE_DIR) + "/configs/workloads", "--worker", worker};
    // A free port unless the test names its own address; never the default 50051, which parallel tests share.
    if (std::find(extra_.begin(), extra_.end(), "--listen") == extra_.end()) {
      args.push_back("--port");
      args.push_back("0");
    }
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = spawn_logged(args, dir_.file("soartuned.log"), env);
    EXPECT_GT(pid_, 0) << "cannot start " << args[0];
    for (int i = 0; i < 400; ++i) {
      std::ifstream in(port_file);
      if (in >> port_) return true;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // SIGTERM, as an operator stops it; the wait status (0: a clean exit).
  int stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return st;
  }
  // kill -9, as a crash or the OOM killer would; start() again brings it back on the same database.
  void kill_hard() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string log() const { return read_text(dir_.file("soartuned.log")); }
  pid_t pid() const { return pid_; }
  int status = 0;
  std::string worker = SOARTUNE_WORKER_PATH;   // the program soartuned runs for each trial
  int cli_timeout_s = 10;                      // the CLI's --timeout (each RPC's deadline)

  ProcessResult cli(std::vector<std::string> args, std::vector<std::pair<std::string, std::string>> env = {}) {
    std::vector<std::string> argv = {SOARTUNE_CLI_PATH, "--addr", addr(), "--timeout", std::to_string(cli_timeout_s)};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, std::move(env));
  }

 private:
  const TempDir& dir_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace soartune::daemon::testing
