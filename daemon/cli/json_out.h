// Machine-readable output (--json): the API's messages as JSON with the proto's field names, enum values
// without their prefix ("COMPLETE", "SUCCEEDED") and 64-bit integers as numbers.
#pragma once

#include <nlohmann/json.hpp>

#include "soartune/v1/tuner.pb.h"

namespace soartune::cli {

namespace v1 = soartune::v1;
using Json = nlohmann::ordered_json;

Json to_json(const v1::Job& j, bool with_spec = false);
// Trials carry "duration_s": {"c1": ..., ...} besides the full "tiers"; `full` adds log_tail and the worker's
// result (parsed when it is JSON).
Json to_json(const v1::Trial& t, bool full = false);
Json to_json(const v1::Suggestion& s);
Json to_json(const v1::Submission& s);
Json to_json(const v1::PlanPick& p);
Json to_json(const v1::JobEvent& e);

// Prints `j` on stdout, indented, with a newline.
void print_json(const Json& j);
// Prints `j` on one line (JSON lines, for streams).
void print_json_line(const Json& j);

}  // namespace soartune::cli
