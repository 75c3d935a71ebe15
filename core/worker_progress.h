// What a running soartune-worker reports before its result: after the accuracy pass and after each tier, one
// line on stdout, {"progress": {...}} (docs/FORMATS.md section 4b), with everything measured so far. The daemon
// reads these lines as they arrive to stop a trial early (search/early_stop.h) and treats them as untrusted input,
// like the result: every field type-checked, an error naming the field, never an exception. The result line
// stays the last line and is read as before (worker_result.h); a progress line is never taken for it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/worker_result.h"

namespace soartune {

// The top-level key that marks a progress line.
inline constexpr const char* kProgressKey = "progress";

// The longest line read as a progress line; a longer one is not progress (the worker's are a few hundred bytes).
inline constexpr size_t kMaxProgressLineBytes = 64u << 10;
// At most this many tiers in one progress line.
inline constexpr size_t kMaxProgressTiers = 16;

struct WorkerProgress {
  // The stage just finished: "accuracy", or the name of the last tier measured ("c1", "c8", "cinf").
  std::string stage;
  AccuracyMeasurement accuracy;
  std::vector<TierMeasurement> tiers;   // every tier measured so far, in the order run
  double elapsed_s = 0;                 // since the worker started
};

// One line of JSON, no trailing newline.
std::string to_json(const WorkerProgress& p);

// Reads one line of the worker's stdout: nullopt when it is not a progress line (a log line, the result, too long,
// not JSON); an error (kInvalidArgument, "bad worker progress: <field>: ...") when it is one of the wrong shape:
// stage not "accuracy" with no tiers or the last tier's name, a tier without a positive duration, an accuracy
// below 0, more than kMaxProgressTiers tiers.
Result<std::optional<WorkerProgress>> parse_worker_progress(std::string_view line);

}  // namespace soartune
