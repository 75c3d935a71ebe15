#include "daemon/request_limits.h"

#include "core/utf8.h"

namespace soartune::daemon {

Status check_text(const std::string& text, const std::string& field, size_t max_bytes) {
  if (text.size() > max_bytes)
    return Status::Invalid(field + ": " + std::to_string(text.size()) + " bytes; allowed: at most " +
                           std::to_string(max_bytes));
  if (soartune::valid_utf8(text) != text) return Status::Invalid(field + ": not valid UTF-8");
  return Status::Ok();
}

Status check_path_length(const std::string& path, const std::string& field) {
  if (path.size() > kMaxPathBytes)
    return Status::Invalid(field + ": path of " + std::to_string(path.size()) + " bytes; allowed: at most " +
                           std::to_string(kMaxPathBytes));
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end - start > kMaxPathComponentBytes)
      return Status::Invalid(field + ": a path component of " + std::to_string(end - start) +
                             " bytes; allowed: at most " + std::to_string(kMaxPathComponentBytes));
    start = end + 1;
  }
  return Status::Ok();
}

Status check_timestamp(int64_t unix_ms, int64_t now_unix_ms, const std::string& field) {
  if (unix_ms < kMinPlausibleUnixMs || unix_ms > now_unix_ms + kFutureSlackMs)
    return Status::Invalid(field + ": " + std::to_string(unix_ms) +
                           " is not a plausible time; allowed: from 2020-01-01 to a day from now (0: now)");
  return Status::Ok();
}

}  // namespace soartune::daemon
