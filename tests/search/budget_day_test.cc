#include "search/budget_day.h"

#include <chrono>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

// Unix ms of a UTC wall-clock time, computed with the standard calendar (independent of the code under test).
int64_t utc_ms(int y, unsigned mo, unsigned d, int h, int mi, int s, int ms = 0) {
  using namespace std::chrono;
  const sys_days day = year{y} / month{mo} / d;
  const auto t = day + hours{h} + minutes{mi} + seconds{s} + milliseconds{ms};
  return duration_cast<milliseconds>(t.time_since_epoch()).count();
}

SubmissionBudget budget(const std::string& tz, int per_day = 3) {
  auto b = SubmissionBudget::make(tz, per_day);
  EXPECT_TRUE(b.ok()) << b.status().message;
  return b.value();
}

TEST(BudgetDay, ParsesOffsets) {
  EXPECT_EQ(parse_utc_offset("UTC+8").value(), 480);
  EXPECT_EQ(parse_utc_offset("UTC-5").value(), -300);
  EXPECT_EQ(parse_utc_offset("UTC+5:30").value(), 330);
  EXPECT_EQ(parse_utc_offset("UTC+05:30").value(), 330);
  EXPECT_EQ(parse_utc_offset("+08:00").value(), 480);
  EXPECT_EQ(parse_utc_offset("-0500").value(), -300);
  EXPECT_EQ(parse_utc_offset("UTC").value(), 0);
  EXPECT_EQ(parse_utc_offset("Z").value(), 0);
  EXPECT_EQ(parse_utc_offset(" utc+8 ").value(), 480);
}

TEST(BudgetDay, RejectsBadOffsetsNamingTheField) {
  for (const char* bad : {"EST", "UTC+15", "UTC+5:3", "UTC+5:75", "8", "UTC+", "+8:00:00", "Asia/Shanghai"}) {
    auto r = parse_utc_offset(bad, "budget.timezone");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code, Code::kInvalidArgument);
    EXPECT_NE(r.status().message.find("budget.timezone"), std::string::npos) << r.status().message;
    EXPECT_NE(r.status().message.find("allowed"), std::string::npos) << r.status().message;
  }
  auto per_day = SubmissionBudget::make("UTC+8", 0);
  ASSERT_FALSE(per_day.ok());
  EXPECT_NE(per_day.status().message.find("budget.per_day"), std::string::npos);
  auto tz = SubmissionBudget::make("Mars", 3);
  ASSERT_FALSE(tz.ok());
  EXPECT_NE(tz.status().message.find("budget.timezone"), std::string::npos);
}

TEST(BudgetDay, DefaultIsUtcPlus8WithThreePerDay) {
  auto b = SubmissionBudget::make();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value().offset_minutes(), 480);
  EXPECT_EQ(b.value().per_day(), 3);
  EXPECT_EQ(b.value().timezone(), "UTC+08:00");
}

TEST(BudgetDay, UtcPlus8RollsOverAt1600Utc) {
  const SubmissionBudget b = budget("UTC+8");
  const int64_t before = utc_ms(2026, 12, 2, 15, 59, 59);
  const int64_t at = utc_ms(2026, 12, 2, 16, 0, 0);
  EXPECT_EQ(b.budget_day(before), "2026-12-02");
  EXPECT_EQ(b.budget_day(at), "2026-12-03");
  EXPECT_EQ(b.resets_at_ms(before), at);
  EXPECT_EQ(b.resets_at(before), "2026-12-03T00:00:00+08:00");
  EXPECT_EQ(b.day_start_ms(at), at);
  EXPECT_EQ(b.resets_at_ms(at), utc_ms(2026, 12, 3, 16, 0, 0));
  // The last millisecond of the day still belongs to it.
  EXPECT_EQ(b.budget_day(at - 1), "2026-12-02");
}

TEST(BudgetDay, Utc) {
  const SubmissionBudget b = budget("UTC");
  EXPECT_EQ(b.budget_day(utc_ms(2026, 12, 31, 23, 59, 59, 999)), "2026-12-31");
  EXPECT_EQ(b.budget_day(utc_ms(2027, 1, 1, 0, 0, 0)), "2027-01-01");
  EXPECT_EQ(b.resets_at(utc_ms(2026, 12, 31, 12, 0, 0)), "2027-01-01T00:00:00Z");
}

TEST(BudgetDay, UtcMinus5) {
  const SubmissionBudget b = budget("UTC-5");
  EXPECT_EQ(b.budget_day(utc_ms(2026, 12, 3, 4, 59, 59)), "2026-12-02");
  EXPECT_EQ(b.budget_day(utc_ms(2026, 12, 3, 5, 0, 0)), "2026-12-03");
  EXPECT_EQ(b.resets_at(utc_ms(2026, 12, 3, 4, 0, 0)), "2026-12-03T00:00:00-05:00");
  EXPECT_EQ(b.resets_at_ms(utc_ms(2026, 12, 3, 4, 0, 0)), utc_ms(2026, 12, 3, 5, 0, 0));
  // Before 1970 the day arithmetic must still floor, not truncate.
  EXPECT_EQ(b.budget_day(utc_ms(1970, 1, 1, 3, 0, 0)), "1969-12-31");
}

TEST(BudgetDay, UtcPlus530) {
  const SubmissionBudget b = budget("UTC+5:30");
  EXPECT_EQ(b.budget_day(utc_ms(2026, 12, 2, 18, 29, 59)), "2026-12-02");
  EXPECT_EQ(b.budget_day(utc_ms(2026, 12, 2, 18, 30, 0)), "2026-12-03");
  EXPECT_EQ(b.resets_at(utc_ms(2026, 12, 2, 12, 0, 0)), "2026-12-03T00:00:00+05:30");
  // Leap day.
  EXPECT_EQ(b.budget_day(utc_ms(2028, 2, 28, 20, 0, 0)), "2028-02-29");
}

TEST(BudgetDay, RemainingAndExhaustedBudget) {
  const SubmissionBudget b = budget("UTC+8", 3);
  EXPECT_EQ(b.remaining(0), 3);
  EXPECT_EQ(b.remaining(2), 1);
  EXPECT_EQ(b.remaining(3), 0);
  EXPECT_EQ(b.remaining(7), 0);
  const int64_t now = utc_ms(2026, 12, 2, 10, 0, 0);
  EXPECT_TRUE(b.check_record(now, 2).ok());
  const Status s = b.check_record(now, 3);
  EXPECT_EQ(s.code, Code::kResourceExhausted);
  EXPECT_NE(s.message.find("2026-12-02"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("2026-12-03T00:00:00+08:00"), std::string::npos) << s.message;

  const BudgetDay d = b.day(now, 2);
  EXPECT_EQ(d.day, "2026-12-02");
  EXPECT_EQ(d.used, 2);
  EXPECT_EQ(d.remaining, 1);
  EXPECT_EQ(d.per_day, 3);
  EXPECT_EQ(d.starts_unix_ms, utc_ms(2026, 12, 1, 16, 0, 0));
  EXPECT_EQ(d.resets_unix_ms, utc_ms(2026, 12, 2, 16, 0, 0));
  EXPECT_EQ(d.resets_at, "2026-12-03T00:00:00+08:00");
}

TEST(BudgetDay, Rfc3339KeepsSecondsAndOffset) {
  EXPECT_EQ(format_rfc3339(utc_ms(2026, 12, 2, 15, 4, 5, 678), 480), "2026-12-02T23:04:05+08:00");
  EXPECT_EQ(format_rfc3339(utc_ms(2026, 12, 2, 3, 4, 5), -300), "2026-12-01T22:04:05-05:00");
  EXPECT_EQ(utc_offset_text(330), "UTC+05:30");
  EXPECT_EQ(utc_offset_text(-300), "UTC-05:00");
  EXPECT_EQ(utc_offset_text(0), "UTC");
}

}  // namespace
}  // namespace soartune::search
