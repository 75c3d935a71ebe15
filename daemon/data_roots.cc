#include "daemon/data_roots.h"

#include <filesystem>

#include "daemon/request_limits.h"

namespace soartune::daemon {

namespace fs = std::filesystem;

namespace {

// True when `p` is `root` or lies below it, compared by whole path components ("/data2" is not under "/data").
bool is_under(const fs::path& p, const fs::path& root) {
  auto pi = p.begin();
  for (auto ri = root.begin(); ri != root.end(); ++ri, ++pi) {
    if (ri->empty()) continue;   // a trailing separator
    if (pi == p.end() || *pi != *ri) return false;
  }
  return true;
}

}  // namespace

soartune::Result<std::string> confine_to_data_roots(const std::string& path, const std::vector<std::string>& roots,
                                                    const std::string& field) {
  if (Status s = check_path_length(path, field); !s.ok()) return s;
  std::error_code ec;
  // weakly_canonical resolves every symlink along the existing prefix, the last component included, so a link
  // inside a root that points outside it is judged by where it points.
  fs::path resolved = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return Status::Invalid(field + ": '" + path + "' is not a usable path (" + ec.message() + ")");
  if (roots.empty()) return resolved.string();
  std::string listed;
  for (const std::string& r : roots) {
    std::error_code rec;
    fs::path root = fs::weakly_canonical(fs::absolute(r, rec), rec);
    if (!rec && is_under(resolved, root)) return resolved.string();
    listed += (listed.empty() ? "" : ", ") + r;
  }
  return Status::PermissionDenied(field + ": '" + path + "' is outside the daemon's data roots (" + listed +
                                  "); soartuned reads only under them (--data-root DIR, config key data_roots)");
}

}  // namespace soartune::daemon
