// A worker's stdout cut into lines as it arrives, for whoever reads it while the worker runs (the early-stop
// rule reads its progress lines). Bounded whatever the worker prints: a line longer than the cap is dropped
// whole (it is no progress line), and only the unfinished line is buffered.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace soartune::daemon {

class OutputLines {
 public:
  using Sink = std::function<void(std::string_view line)>;
  OutputLines(Sink sink, size_t max_line_bytes) : sink_(std::move(sink)), max_(max_line_bytes) {}
  // Feeds bytes; calls the sink once per complete line (without its newline) of at most max_line_bytes.
  void feed(const char* p, size_t n);

 private:
  Sink sink_;
  size_t max_ = 0;
  std::string partial_;
  bool skipping_ = false;   // the current line passed the cap: drop it up to its newline
};

}  // namespace soartune::daemon
