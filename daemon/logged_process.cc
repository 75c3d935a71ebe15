#include "daemon/logged_process.h"

#include <fcntl.h>
#include <spawn.h>

extern "C" char** environ;

namespace soartune::daemon {

pid_t spawn_logged(const std::vector<std::string>& argv, const std::string& log_path,
                   const std::vector<std::pair<std::string, std::string>>& env) {
  if (argv.empty()) return -1;
  std::vector<std::string> args = argv;
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  arg_ptrs.push_back(nullptr);
  // This process's environment less the names `env` sets, then `env`: the child sees each name once.
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool overridden = false;
    for (const auto& [name, value] : env) overridden = overridden || entry.rfind(name + "=", 0) == 0;
    if (!overridden) env_text.push_back(entry);
  }
  for (const auto& [name, value] : env) env_text.push_back(name + "=" + value);
  std::vector<char*> env_ptrs;
  for (std::string& e : env_text) env_ptrs.push_back(e.data());
  env_ptrs.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = -1;
  if (posix_spawn(&pid, arg_ptrs[0], &actions, nullptr, arg_ptrs.data(), env_ptrs.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

}  // namespace soartune::daemon
