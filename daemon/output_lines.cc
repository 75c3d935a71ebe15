#include "daemon/output_lines.h"

#include <cstring>

namespace soartune::daemon {

void OutputLines::feed(const char* p, size_t n) {
  while (n > 0) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', n));
    const size_t take = nl ? static_cast<size_t>(nl - p) : n;
    if (!skipping_) {
      if (partial_.size() + take > max_) {
        partial_.clear();
        skipping_ = true;
      } else {
        partial_.append(p, take);
      }
    }
    if (!nl) return;
    if (!skipping_ && sink_) sink_(partial_);
    partial_.clear();
    skipping_ = false;
    p = nl + 1;
    n -= take + 1;
  }
}

}  // namespace soartune::daemon
