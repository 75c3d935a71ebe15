// The CLI's commands, grouped by what they act on. Each add_* registers its subcommands on the app; the
// parsed subcommand leaves its action in Context::action, which main runs against the daemon.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "daemon/cli/client.h"

namespace soartune::cli {

struct Context {
  GlobalOptions global;
  std::function<int(Client&)> action;
};

void add_job_commands(CLI::App& app, Context& ctx);          // submit, jobs, status, watch, cancel
void add_trial_commands(CLI::App& app, Context& ctx);        // trials, show, best, export
void add_submission_commands(CLI::App& app, Context& ctx);   // plan, record, submissions

struct WatchOptions {
  bool plain = false;   // one line per event even on a terminal
  bool json = false;    // one JSON object per event (JSON lines)
};
// Follows the job until it finishes: 0 when it SUCCEEDED, kExitError when it FAILED or was CANCELLED.
int watch_job(Client& client, const std::string& job_id, const WatchOptions& options);

// Shared by the commands: fetches the job (for its spec's gate levels) and the reference trial 0's params.
grpc::Status fetch_job(Client& client, const std::string& job_id, v1::Job* job);
google::protobuf::Map<std::string, std::string> reference_params(Client& client, const std::string& job_id);

}  // namespace soartune::cli
