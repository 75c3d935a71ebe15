// The sizes a client may send: every text the daemon stores is bounded here, so that no stored row, and hence
// no response, can grow past gRPC's message limit however a request is crafted.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace soartune::daemon {

inline constexpr size_t kMaxRequestBytes = 4u << 20;      // gRPC refuses larger requests outright (RESOURCE_EXHAUSTED)
inline constexpr size_t kMaxResponseBytes = 2u << 20;    // a list page stops growing here (gRPC's limit: 4 MiB)
inline constexpr size_t kMaxSpecBytes = 256u << 10;       // a job spec (the YAML text, stored verbatim)
inline constexpr size_t kMaxNameBytes = 200;              // a job's name
inline constexpr size_t kMaxNoteBytes = 4096;             // a submission's note
inline constexpr size_t kMaxPathBytes = 4096;             // a path in a spec (PATH_MAX)
inline constexpr size_t kMaxPathComponentBytes = 255;     // one component of it (NAME_MAX)
inline constexpr int64_t kMinPlausibleUnixMs = 1577836800000;   // 2020-01-01: older than the project
inline constexpr int64_t kFutureSlackMs = 24LL * 3600 * 1000;     // clocks disagree by less than a day

// INVALID_ARGUMENT naming `field` when `text` is longer than `max_bytes` or not valid UTF-8.
soartune::Status check_text(const std::string& text, const std::string& field, size_t max_bytes);
// INVALID_ARGUMENT naming `field` when `path` or one of its components is longer than the file system allows.
soartune::Status check_path_length(const std::string& path, const std::string& field);
// INVALID_ARGUMENT naming `field` unless `unix_ms` lies between 2020 and a day from `now_unix_ms`.
soartune::Status check_timestamp(int64_t unix_ms, int64_t now_unix_ms, const std::string& field);

}  // namespace soartune::daemon
