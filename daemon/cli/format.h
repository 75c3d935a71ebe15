// Human output of the CLI: number formats, aligned tables, and the small pieces of interpretation the
// tables need (which params vary). Scores, gates and their levels are the daemon's: the CLI shows them.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "soartune/v1/tuner.pb.h"

namespace soartune::cli {

namespace v1 = soartune::v1;

// Durations in seconds with 3 significant digits ("0.0123", "1.23", "12.3", "123"); "-" when absent (<= 0).
std::string fmt_duration(double seconds);
std::string fmt_score(double score);              // 2 decimals
std::string fmt_accuracy(double pct);             // "99.12%"
std::string fmt_percent(double probability);      // 0.123 -> "12%", one decimal below 10%
std::string fmt_gate(double c);                   // "1", "0.96"
std::string fmt_bytes(int64_t bytes);             // "123 MiB"
std::string fmt_time(int64_t unix_ms);            // local "2026-12-02 16:15:30"; "-" for 0
std::string fmt_elapsed(double seconds);          // "45s", "3m20s", "1h02m"; "-" when negative
// Where a trial's time went: "load 31.2 s (weights 2.10, quantise 4.00, engine 20.3), accuracy 3.40 s, tiers
// 10.1 s"; parts that took no time are left out. "" when the worker reported no timings (load 0).
std::string fmt_trial_timings(const v1::TrialTimings& t);

// "JOB_SUCCEEDED" -> "SUCCEEDED", "TRIAL_COMPLETE" -> "COMPLETE".
std::string state_name(v1::JobState s);
std::string status_name(v1::TrialStatus s);
// "FAILURE_OUT_OF_MEMORY" -> "out_of_memory" (the store's and the worker's names); "" when unspecified.
std::string failure_name(v1::FailureKind k);
bool is_terminal(v1::JobState s);

// Duration of the named tier ("c1", "c8", "cinf"), or 0 when the trial has none.
double tier_duration(const v1::Trial& t, const std::string& tier);
// Tier names in order of first appearance over the trials; c1, c8, cinf when there are none.
std::vector<std::string> tier_names(const std::vector<const v1::Trial*>& trials);

// The param names whose values differ between the given param sets (a missing value counts as different);
// with fewer than two sets, every name.
std::vector<std::string> varying_params(const std::vector<const google::protobuf::Map<std::string, std::string>*>& sets);
// "weight_bits=4 kv_cache_dtype=fp8_e4m3" for the names in `names` (all when empty).
std::string params_brief(const google::protobuf::Map<std::string, std::string>& params,
                         const std::vector<std::string>& names = {});
// The params that differ from `reference`, as params_brief; "(reference)" when none do.
std::string params_vs(const google::protobuf::Map<std::string, std::string>& params,
                      const google::protobuf::Map<std::string, std::string>& reference);
// The parameter names of the job spec's `space:` in spec order (the knobs the search varies); empty when the
// spec has none or cannot be read.
std::vector<std::string> space_params(const std::string& spec_yaml);
// A short column header for a knob ("weight_bits" -> "wbits"); unknown names as they are.
std::string knob_header(const std::string& knob);

// The gate levels the daemon sent with the job (Job.gate_levels: best first, ending with 0, the order of
// Suggestion.p_gate and PlanPick.p_gate); empty when there is no job at hand.
std::vector<double> gate_levels(const v1::Job* job);
// "P(C=1)", "P(C=0.96)", ... for `n` probabilities; generic names when n does not match the levels.
std::vector<std::string> gate_labels(const std::vector<double>& levels, size_t n);

// A table printed with columns aligned: text left-aligned, numbers right-aligned.
class Table {
 public:
  enum Align { kLeft, kRight };
  void add_column(std::string header, Align align = kLeft);
  void add_row(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// Width on a terminal: UTF-8 code points, not bytes.
size_t display_width(const std::string& s);
// At most `width` columns, ending in "..." when cut; newlines become spaces.
std::string truncate(const std::string& s, size_t width);

}  // namespace soartune::cli
