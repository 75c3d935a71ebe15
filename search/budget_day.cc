#include "search/budget_day.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>

namespace soartune::search {
namespace {

constexpr int64_t kMsPerDay = 86'400'000;
constexpr int kMaxOffsetMinutes = 14 * 60;

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Days since 1970-01-01 of the local (offset) date of an instant.
int64_t local_day_number(int64_t unix_ms, int offset_minutes) {
  return floor_div(unix_ms + int64_t{offset_minutes} * 60'000, kMsPerDay);
}

std::string date_text(int64_t day_number) {
  const std::chrono::year_month_day ymd{std::chrono::sys_days{std::chrono::days{day_number}}};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02u", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
  return buf;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

Result<int> parse_utc_offset(const std::string& text, const std::string& field) {
  const std::string allowed =
      "; allowed: UTC, UTC+H, UTC-H, UTC+H:MM, +HH:MM, -HHMM (offsets up to 14:00), e.g. UTC+8, UTC+5:30, +08:00";
  auto bad = [&](const std::string& why) {
    return Status::Invalid(field + ": '" + text + "' " + why + allowed);
  };
  std::string s = text;
  // Trim surrounding blanks.
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::string upper;
  for (char c : s) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "UTC" || upper == "Z" || upper == "GMT") return 0;
  if (upper.rfind("UTC", 0) == 0 || upper.rfind("GMT", 0) == 0) upper = upper.substr(3);
  if (upper.empty() || (upper[0] != '+' && upper[0] != '-')) return bad("is not a fixed UTC offset");
  const int sign = upper[0] == '-' ? -1 : 1;
  const std::string rest = upper.substr(1);
  std::string hh = rest, mm;   // no minutes given: 0
  if (const auto colon = rest.find(':'); colon != std::string::npos) {
    hh = rest.substr(0, colon);
    mm = rest.substr(colon + 1);
    if (mm.size() != 2) return bad("needs two digits of minutes after ':'");
  } else if (rest.size() == 4) {
    hh = rest.substr(0, 2);
    mm = rest.substr(2);
  }
  if (hh.empty() || hh.size() > 2 || !all_digits(hh) || (!mm.empty() && !all_digits(mm)))
    return bad("is not a fixed UTC offset");
  const int hours = std::stoi(hh), minutes = mm.empty() ? 0 : std::stoi(mm);
  if (minutes >= 60) return bad("has minutes above 59");
  const int total = hours * 60 + minutes;
  if (total > kMaxOffsetMinutes) return bad("is beyond 14:00");
  return sign * total;
}

std::string utc_offset_text(int offset_minutes) {
  if (offset_minutes == 0) return "UTC";
  const int a = offset_minutes < 0 ? -offset_minutes : offset_minutes;
  char buf[16];
  std::snprintf(buf, sizeof buf, "UTC%c%02d:%02d", offset_minutes < 0 ? '-' : '+', a / 60, a % 60);
  return buf;
}

std::string format_rfc3339(int64_t unix_ms, int offset_minutes) {
  const int64_t local_ms = unix_ms + int64_t{offset_minutes} * 60'000;
  const int64_t day = floor_div(local_ms, kMsPerDay);
  const int64_t secs_of_day = floor_div(local_ms - day * kMsPerDay, 1000);
  char time_buf[16];
  std::snprintf(time_buf, sizeof time_buf, "T%02d:%02d:%02d", static_cast<int>(secs_of_day / 3600),
                static_cast<int>(secs_of_day / 60 % 60), static_cast<int>(secs_of_day % 60));
  std::string zone = "Z";
  if (offset_minutes != 0) {
    const int a = offset_minutes < 0 ? -offset_minutes : offset_minutes;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%c%02d:%02d", offset_minutes < 0 ? '-' : '+', a / 60, a % 60);
    zone = buf;
  }
  return date_text(day) + time_buf + zone;
}

Result<SubmissionBudget> SubmissionBudget::make(const std::string& timezone, int per_day,
                                                const std::string& field) {
  auto offset = parse_utc_offset(timezone, field + ".timezone");
  if (!offset.ok()) return offset.status();
  if (per_day < 1)
    return Status::Invalid(field + ".per_day: " + std::to_string(per_day) + " is not allowed; allowed: >= 1");
  return SubmissionBudget(offset.value(), per_day);
}

std::string SubmissionBudget::budget_day(int64_t unix_ms) const {
  return date_text(local_day_number(unix_ms, offset_minutes_));
}

int64_t SubmissionBudget::day_start_ms(int64_t unix_ms) const {
  return local_day_number(unix_ms, offset_minutes_) * kMsPerDay - int64_t{offset_minutes_} * 60'000;
}

int64_t SubmissionBudget::resets_at_ms(int64_t unix_ms) const { return day_start_ms(unix_ms) + kMsPerDay; }

std::string SubmissionBudget::resets_at(int64_t unix_ms) const {
  return format_rfc3339(resets_at_ms(unix_ms), offset_minutes_);
}

int SubmissionBudget::remaining(int n_used) const { return n_used >= per_day_ ? 0 : per_day_ - std::max(n_used, 0); }

BudgetDay SubmissionBudget::day(int64_t unix_ms, int n_used) const {
  BudgetDay d;
  d.day = budget_day(unix_ms);
  d.starts_unix_ms = day_start_ms(unix_ms);
  d.resets_unix_ms = resets_at_ms(unix_ms);
  d.resets_at = format_rfc3339(d.resets_unix_ms, offset_minutes_);
  d.per_day = per_day_;
  d.used = n_used;
  d.remaining = remaining(n_used);
  return d;
}

Status SubmissionBudget::check_record(int64_t unix_ms, int n_used) const {
  if (remaining(n_used) > 0) return Status::Ok();
  return Status::Exhausted("daily submission budget spent: " + std::to_string(n_used) + " of " +
                           std::to_string(per_day_) + " submissions recorded on " + budget_day(unix_ms) + " (" +
                           timezone() + "); resets at " + resets_at(unix_ms));
}

}  // namespace soartune::search
