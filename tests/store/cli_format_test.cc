#include "daemon/cli/format.h"

#include <sstream>

#include <gtest/gtest.h>

namespace soartune::cli {
namespace {

TEST(CliFormat, DurationsHaveThreeSignificantDigits) {
  EXPECT_EQ(fmt_duration(1.23456), "1.23");
  EXPECT_EQ(fmt_duration(12.3456), "12.3");
  EXPECT_EQ(fmt_duration(123.456), "123");
  EXPECT_EQ(fmt_duration(0.0123456), "0.0123");
  EXPECT_EQ(fmt_duration(0.5), "0.500");
  EXPECT_EQ(fmt_duration(9.996), "10.0");    // rounds up across a decade without a fourth digit
  EXPECT_EQ(fmt_duration(99.96), "100");
  EXPECT_EQ(fmt_duration(1234.5), "1230");
  EXPECT_EQ(fmt_duration(0), "-");
  EXPECT_EQ(fmt_duration(-1), "-");
}

TEST(CliFormat, ScoresAccuracyAndProbabilities) {
  EXPECT_EQ(fmt_score(87.314), "87.31");
  EXPECT_EQ(fmt_score(0), "0.00");
  EXPECT_EQ(fmt_accuracy(99.126), "99.13%");
  EXPECT_EQ(fmt_accuracy(100), "100.00%");
  EXPECT_EQ(fmt_percent(0.6), "60%");
  EXPECT_EQ(fmt_percent(0.05), "5.0%");
  EXPECT_EQ(fmt_percent(0), "0%");
  EXPECT_EQ(fmt_gate(0.96), "0.96");
  EXPECT_EQ(fmt_gate(1.0), "1");
  EXPECT_EQ(fmt_bytes(123456789), "117.7 MiB");
  EXPECT_EQ(fmt_elapsed(45), "45s");
  EXPECT_EQ(fmt_elapsed(200), "3m20s");
  EXPECT_EQ(fmt_elapsed(3720), "1h02m");
  EXPECT_EQ(fmt_elapsed(-1), "-");
}

TEST(CliFormat, EnumNamesLoseTheirPrefix) {
  EXPECT_EQ(state_name(v1::JOB_SUCCEEDED), "SUCCEEDED");
  EXPECT_EQ(status_name(v1::TRIAL_COMPLETE), "COMPLETE");
  EXPECT_EQ(status_name(v1::TRIAL_STATUS_UNSPECIFIED), "UNKNOWN");
  EXPECT_TRUE(is_terminal(v1::JOB_CANCELLED));
  EXPECT_FALSE(is_terminal(v1::JOB_RUNNING));
}

v1::Trial trial(std::initializer_list<std::pair<const char*, const char*>> params) {
  v1::Trial t;
  for (const auto& [k, v] : params) (*t.mutable_params())[k] = v;
  return t;
}

TEST(CliFormat, VaryingParamsAreThoseThatDiffer) {
  v1::Trial a = trial({{"weight_bits", "16"}, {"kv_cache_dtype", "bf16"}, {"kv_page_size", "16"}});
  v1::Trial b = trial({{"weight_bits", "4"}, {"kv_cache_dtype", "bf16"}, {"kv_page_size", "16"}});
  v1::Trial c = trial({{"weight_bits", "4"}, {"kv_cache_dtype", "bf16"}, {"weight_group_size", "64"}});
  EXPECT_EQ(varying_params({&a.params(), &b.params()}), (std::vector<std::string>{"weight_bits"}));
  // A param missing from one set varies too.
  EXPECT_EQ(varying_params({&a.params(), &b.params(), &c.params()}),
            (std::vector<std::string>{"kv_page_size", "weight_bits", "weight_group_size"}));
  EXPECT_EQ(varying_params({&a.params()}).size(), 3u);
  EXPECT_EQ(params_brief(b.params(), {"weight_bits"}), "weight_bits=4");
  EXPECT_EQ(params_vs(b.params(), a.params()), "weight_bits=4");
  EXPECT_EQ(params_vs(a.params(), a.params()), "(reference)");
  EXPECT_EQ(knob_header("max_running_requests"), "max_run");
  EXPECT_EQ(knob_header("something_new"), "something_new");
}

TEST(CliFormat, TierDurationsByName) {
  v1::Trial t;
  for (const char* name : {"c1", "c8", "cinf"}) {
    auto* m = t.add_tiers();
    m->set_tier(name);
    m->set_duration_s(name[1] == '1' ? 1.5 : 2.5);
  }
  EXPECT_DOUBLE_EQ(tier_duration(t, "c1"), 1.5);
  EXPECT_DOUBLE_EQ(tier_duration(t, "cinf"), 2.5);
  EXPECT_DOUBLE_EQ(tier_duration(t, "c4"), 0);
  EXPECT_EQ(tier_names({&t}), (std::vector<std::string>{"c1", "c8", "cinf"}));
  v1::Trial empty;
  EXPECT_EQ(tier_names({&empty}), (std::vector<std::string>{"c1", "c8", "cinf"}));
}

TEST(CliFormat, GateLevelsAreTheDaemons) {
  v1::Job job;
  for (double g : {1.0, 0.5, 0.0}) job.add_gate_levels(g);
  EXPECT_EQ(gate_levels(&job), (std::vector<double>{1.0, 0.5, 0.0}));
  EXPECT_TRUE(gate_levels(nullptr).empty());
  EXPECT_EQ(gate_labels({1.0, 0.96, 0.92, 0.0}, 4),
            (std::vector<std::string>{"P(C=1)", "P(C=0.96)", "P(C=0.92)", "P(C=0)"}));
  EXPECT_EQ(gate_labels({1.0, 0.0}, 3)[2], "P(gate 2)");
}

TEST(CliFormat, SpaceParamsInSpecOrder) {
  EXPECT_EQ(space_params("space:\n  weight_bits: {type: choice, values: [16, 4]}\n  kv_cache_dtype: {type: choice, "
                         "values: [bf16]}\n  kv_page_size: {type: pow2, low: 8, high: 64}\n"),
            (std::vector<std::string>{"weight_bits", "kv_cache_dtype", "kv_page_size"}));
  EXPECT_TRUE(space_params("model: x\n").empty());
  EXPECT_TRUE(space_params("space: [1, 2]\n").empty());
  EXPECT_TRUE(space_params("space: {a: [\n").empty());
}

TEST(CliFormat, TablesAlignColumns) {
  Table t;
  t.add_column("#", Table::kRight);
  t.add_column("status");
  t.add_column("score", Table::kRight);
  t.add_row({"1", "COMPLETE", "87.31"});
  t.add_row({"10", "FAILED", "-"});
  t.add_row({"2", "±x", "1.00"});   // display width counts code points, not bytes
  std::ostringstream out;
  t.print(out);
  EXPECT_EQ(out.str(),
            " #  status    score\n"
            " 1  COMPLETE  87.31\n"
            "10  FAILED        -\n"
            " 2  ±x         1.00\n");
}

TEST(CliFormat, TruncateFlattensAndCuts) {
  EXPECT_EQ(truncate("short", 10), "short");
  EXPECT_EQ(truncate("line one\nline two", 100), "line one line two");
  EXPECT_EQ(truncate("abcdefghijklmnop", 10), "abcdefg...");
  EXPECT_EQ(display_width(truncate("abcdefghijklmnop", 10)), 10u);
}

TEST(CliFormat, TrialTimingsLineSaysWhereTheTimeWent) {
  v1::TrialTimings t;
  EXPECT_EQ(fmt_trial_timings(t), "") << "no timings reported: no line";
  t.set_accuracy_s(3.4);
  EXPECT_EQ(fmt_trial_timings(t), "") << "a load of 0 means the worker reported none";
  t.set_load_s(31.2);
  t.set_weights_s(2.1);
  t.set_quantize_s(4.0);
  t.set_prepare_s(20.3);
  t.set_tiers_s(10.1);
  EXPECT_EQ(fmt_trial_timings(t), "load 31.2 s (weights 2.10, quantise 4.00, engine 20.3), accuracy 3.40 s, tiers 10.1 s");
  // Parts that took no time (no quantisation at 16 bits) are left out, and so is an empty parenthesis.
  t.set_quantize_s(0);
  EXPECT_EQ(fmt_trial_timings(t), "load 31.2 s (weights 2.10, engine 20.3), accuracy 3.40 s, tiers 10.1 s");
  t.set_weights_s(0);
  t.set_prepare_s(0);
  t.set_accuracy_s(0);
  EXPECT_EQ(fmt_trial_timings(t), "load 31.2 s, tiers 10.1 s");
}

}  // namespace
}  // namespace soartune::cli
