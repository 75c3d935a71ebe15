#include "core/failure_kind.h"

#include <array>
#include <utility>

namespace soartune {

namespace {

constexpr std::array<std::pair<FailureKind, const char*>, 14> kNames = {{
    {FailureKind::kNone, ""},
    {FailureKind::kInvalidConfig, "invalid_config"},
    {FailureKind::kOutOfMemory, "out_of_memory"},
    {FailureKind::kCrash, "crash"},
    {FailureKind::kTimeout, "timeout"},
    {FailureKind::kExitCode, "exit_code"},
    {FailureKind::kBadOutput, "bad_output"},
    {FailureKind::kWorkerError, "worker_error"},
    {FailureKind::kNotStarted, "not_started"},
    {FailureKind::kCancelled, "cancelled"},
    {FailureKind::kRestart, "restart"},
    {FailureKind::kUnknown, "unknown"},
    {FailureKind::kNodeFailure, "node_failure"},
    {FailureKind::kPreempted, "preempted"},
}};

}  // namespace

const char* to_string(FailureKind k) {
  for (const auto& [kind, name] : kNames)
    if (kind == k) return name;
  return "unknown";
}

std::optional<FailureKind> failure_kind_from_string(std::string_view s) {
  for (const auto& [kind, name] : kNames)
    if (s == name) return kind;
  return std::nullopt;
}

bool is_about_the_config(FailureKind k) {
  switch (k) {
    case FailureKind::kNone:
    case FailureKind::kNotStarted:
    case FailureKind::kCancelled:
    case FailureKind::kRestart:
    case FailureKind::kNodeFailure:
    case FailureKind::kPreempted:
      return false;
    default:
      return true;
  }
}

}  // namespace soartune
