// A program started to run beside the caller until the caller stops it, its stdout and stderr appended to one log
// file to read when something goes wrong: how the load benchmark (daemon/bench/daemon_load.cc) and the tests start
// soartuned, and the Slurm test munged, slurmctld and slurmd. Unlike run_process (worker_process.h), nothing is
// captured, timed or limited: the caller ends it (kill, then waitpid).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace soartune::daemon {

// Starts argv[0] (a path) with `env` set on top of this process's environment, stdout and stderr appended to
// `log_path` (created if absent). Returns the child's pid, or -1 when it could not be started.
pid_t spawn_logged(const std::vector<std::string>& argv, const std::string& log_path,
                   const std::vector<std::pair<std::string, std::string>>& env = {});

}  // namespace soartune::daemon
