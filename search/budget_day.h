// The daily official-submission budget: which budget day an instant falls on, when that day resets, and how
// many submissions remain. Time zones are fixed UTC offsets (the race runs on UTC+8); nothing here reads the
// machine's local time zone.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace soartune::search {

inline constexpr const char* kDefaultBudgetTimeZone = "UTC+8";
inline constexpr int kDefaultSubmissionsPerDay = 3;

// Parses a fixed-offset time zone: "UTC", "Z", "UTC+8", "UTC-5", "UTC+5:30", "UTC+05:30", "+08:00", "-0500".
// Returns the offset east of UTC in minutes (-14:00 .. +14:00). Errors name `field`.
Result<int> parse_utc_offset(const std::string& text, const std::string& field = "budget.timezone");
// "UTC+08:00", "UTC-05:00", "UTC+05:30", "UTC" (offset 0).
std::string utc_offset_text(int offset_minutes);
// RFC 3339 with the given offset, whole seconds: "2026-12-03T00:00:00+08:00" ("Z" for offset 0).
std::string format_rfc3339(int64_t unix_ms, int offset_minutes);

// One budget day as seen at some instant.
struct BudgetDay {
  std::string day;                 // YYYY-MM-DD in the budget time zone
  int64_t starts_unix_ms = 0;      // first instant of the day
  int64_t resets_unix_ms = 0;      // first instant of the next day
  std::string resets_at;           // resets_unix_ms as RFC 3339 in the budget time zone
  int per_day = 0;
  int used = 0;
  int remaining = 0;               // max(0, per_day - used)
};

class SubmissionBudget {
 public:
  // Errors name `field` + ".timezone" / ".per_day" (per_day must be >= 1).
  static Result<SubmissionBudget> make(const std::string& timezone = kDefaultBudgetTimeZone,
                                       int per_day = kDefaultSubmissionsPerDay,
                                       const std::string& field = "budget");

  int per_day() const { return per_day_; }
  int offset_minutes() const { return offset_minutes_; }
  std::string timezone() const { return utc_offset_text(offset_minutes_); }

  std::string budget_day(int64_t unix_ms) const;          // YYYY-MM-DD
  int64_t day_start_ms(int64_t unix_ms) const;            // first instant of that budget day
  int64_t resets_at_ms(int64_t unix_ms) const;            // first instant of the next budget day
  std::string resets_at(int64_t unix_ms) const;           // RFC 3339 in the budget time zone
  int remaining(int n_used) const;                        // max(0, per_day - n_used)

  // Everything about the day containing `unix_ms`, given `n_used` submissions already recorded on it.
  BudgetDay day(int64_t unix_ms, int n_used) const;
  // Ok when another submission may be recorded on the day of `unix_ms`; otherwise kResourceExhausted with a
  // message naming the day, the limit and when it resets.
  Status check_record(int64_t unix_ms, int n_used) const;

 private:
  SubmissionBudget(int offset_minutes, int per_day) : offset_minutes_(offset_minutes), per_day_(per_day) {}
  int offset_minutes_ = 8 * 60;
  int per_day_ = kDefaultSubmissionsPerDay;
};

}  // namespace soartune::search
