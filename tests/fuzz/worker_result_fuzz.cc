// Fuzz target: a worker's stdout and stderr as the daemon reads them (daemon/trial_result.h
// interpret_worker_run, which calls core/worker_result parse_worker_output). The input is both streams of one
// finished worker, with one of the exit statuses the daemon distinguishes. Beyond "no crash", it checks what the
// daemon relies on: every string it would store is valid UTF-8, and a parsed result printed again with
// to_json() reads back to the same result. Each line is also read as a progress line (core/worker_progress.h),
// as the runner reads them while the worker runs, with the same round-trip check.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/utf8.h"
#include "core/worker_progress.h"
#include "core/worker_result.h"
#include "daemon/trial_result.h"

namespace {

using soartune::daemon::ProcessResult;
using soartune::daemon::TrialRecord;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
  }
}

bool is_utf8(const std::string& s) { return soartune::valid_utf8(s) == s; }

void check_stored_text(const TrialRecord& t, const std::string& error) {
  require(is_utf8(error), "trial error is not UTF-8");
  require(is_utf8(t.log_tail), "log tail is not UTF-8");
  require(is_utf8(t.result_json), "result_json is not UTF-8");
  require(is_utf8(t.engine_build) && is_utf8(t.device) && is_utf8(t.accuracy_metric), "a result string is not UTF-8");
  for (const auto& p : t.plans) {
    require(is_utf8(p.op) && is_utf8(p.shape), "a plan is not UTF-8");
    for (const auto& [k, v] : p.choice) require(is_utf8(k) && is_utf8(v), "a plan choice is not UTF-8");
  }
  for (const auto& [k, v] : t.env) require(is_utf8(k) && is_utf8(v), "an env entry is not UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The exits the daemon tells apart: success, the worker's documented "bad config" (2), another status, a crash;
  // one per input, chosen by its length, so every input costs one interpretation.
  struct Exit { bool exited; int code; int signal; };
  static constexpr Exit kExits[] = {{true, 0, 0}, {true, 2, 0}, {true, 1, 0}, {false, -1, 11}};
  {
    const Exit e = kExits[size % 4];
    ProcessResult run;
    run.started = true;
    run.exited = e.exited;
    run.exit_code = e.code;
    run.term_signal = e.signal;
    run.out = text;
    run.err_tail = text;
    TrialRecord t;
    const auto outcome = soartune::daemon::interpret_worker_run(run, 60, t);
    check_stored_text(t, outcome.error);
  }
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    auto progress = soartune::parse_worker_progress(std::string_view(text).substr(start, end - start));
    if (progress.ok() && progress.value()) {
      const std::string once = soartune::to_json(*progress.value());
      require(is_utf8(once), "a progress line printed again is not UTF-8");
      auto again = soartune::parse_worker_progress(once);
      require(again.ok() && again.value(), "to_json() of a parsed progress line does not parse");
      require(soartune::to_json(*again.value()) == once, "progress to_json() does not round-trip");
    }
    start = end + 1;
  }
  auto parsed = soartune::parse_worker_output(text);
  if (parsed.ok()) {
    const std::string once = soartune::to_json(parsed.value());
    auto again = soartune::parse_worker_output(once);
    require(again.ok(), "to_json() of a parsed result does not parse");
    require(soartune::to_json(again.value()) == once, "to_json() does not round-trip");
  }
  return 0;
}
