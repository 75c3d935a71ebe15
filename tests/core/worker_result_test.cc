// The worker's result both ways: what to_json writes, parse_worker_output reads back unchanged; what a hostile
// or broken worker prints is an error naming the field, never an exception; text stays valid UTF-8.
#include "core/worker_result.h"

#include <chrono>

#include <gtest/gtest.h>

#include "core/utf8.h"

namespace soartune {
namespace {

WorkerResult full_result() {
  WorkerResult r;
  r.ok = true;
  r.backend = "cuda";
  r.device = "NVIDIA H200";
  r.engine_build = "0.1.0+abc";
  r.tiers = {{"c1", 1, 1.5, 10, 640, {1, 2, 3}, {4, 5, 6}, 426.7}, {"c8", 8, 0.5, 10, 640, {}, {}, 1280},
             {"cinf", 0, 0.25, 10, 640, {}, {}, 2560}};
  r.accuracy = {"fidelity", 99.25, 0.9925, 1, 4000};
  r.peak_memory_bytes = int64_t{1} << 33;
  r.load_s = 3;
  r.accuracy_s = 1.5;
  r.tiers_s = 2.25;
  r.weights_s = 1.25;
  r.prepare_s = 0.5;
  r.plans = {{"gemv", "m1 n4096 k4096", {{"variant", "m1w8u2b4"}}}, {"attention_decode", "h32 d128", {{"kv_splits", "4"}}}};
  r.quantization = {"gptq", 48, 2, false, 12.5, "cuda"};
  return r;
}

TEST(WorkerResult, RoundTripsThroughJson) {
  const WorkerResult r = full_result();
  Result<WorkerResult> back = parse_worker_output("a log line\n" + to_json(r) + "\n");
  ASSERT_TRUE(back.ok()) << back.status().message;
  const WorkerResult& b = back.value();
  EXPECT_TRUE(b.ok);
  EXPECT_EQ(b.device, r.device);
  ASSERT_EQ(b.tiers.size(), 3u);
  EXPECT_EQ(b.tiers[0].tier, "c1");
  EXPECT_DOUBLE_EQ(b.tiers[0].tpot_ms.p99, 6);
  EXPECT_EQ(b.tiers[2].output_tokens, 640);
  EXPECT_DOUBLE_EQ(b.accuracy.relative_pct, 99.25);
  EXPECT_EQ(b.accuracy.positions, 4000);
  EXPECT_EQ(b.peak_memory_bytes, r.peak_memory_bytes);
  EXPECT_DOUBLE_EQ(b.tiers_s, 2.25);
  EXPECT_DOUBLE_EQ(b.weights_s, 1.25);
  EXPECT_DOUBLE_EQ(b.prepare_s, 0.5);
  ASSERT_EQ(b.plans.size(), 2u);
  EXPECT_EQ(b.plans[1].op, "attention_decode");
  EXPECT_EQ(b.plans[0].choice, r.plans[0].choice);
  EXPECT_EQ(b.quantization.solver, "cuda");
  EXPECT_EQ(b.quantization.held_out_skipped, 2);
  EXPECT_EQ(to_json(b), to_json(r));
}

TEST(WorkerResult, ErrorsRoundTripWithTheirKind) {
  for (FailureKind k : {FailureKind::kInvalidConfig, FailureKind::kOutOfMemory, FailureKind::kWorkerError}) {
    WorkerResult r;
    r.error = {k, k == FailureKind::kInvalidConfig ? "launch.kv_cache_dtype" : "", "no"};
    Result<WorkerResult> back = parse_worker_output(to_json(r));
    ASSERT_TRUE(back.ok()) << back.status().message;
    EXPECT_FALSE(back.value().ok);
    EXPECT_EQ(back.value().error.kind, k);
    EXPECT_EQ(back.value().error.field, r.error.field);
    EXPECT_EQ(back.value().error.message, "no");
  }
  Result<WorkerResult> bad = parse_worker_output(R"({"ok": false, "error": {"kind": "restart"}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message,
            "bad worker result: error.kind: 'restart' is not one of invalid_config, out_of_memory, worker_error");
}

TEST(WorkerResult, WrongShapesNameTheField) {
  struct Case { const char* text; const char* message; };
  for (const Case& c : {
           Case{"", "garbage output: printed nothing on stdout"},
           Case{"not json", "garbage output: stdout is not a JSON object (starts with 'not json')"},
           Case{"[1, 2]", "garbage output: stdout is not a JSON object (starts with '[1, 2]')"},
           Case{R"({"ok": 1})", "bad worker result: ok: expected a boolean, got number"},
           Case{R"({"ok": "yes"})", "bad worker result: ok: expected a boolean, got string"},
           Case{R"({})", "bad worker result: ok: missing"},
           Case{R"({"ok": true, "accuracy": {"relative_pct": 1}})", "bad worker result: tiers: missing"},
           Case{R"({"ok": true, "tiers": [{"tier": "c1", "duration_s": 1, "requests": 1.5}], "accuracy": {"relative_pct": 1}})",
                "bad worker result: tiers[0].requests: expected an integer, got number"},
           Case{R"({"ok": true, "tiers": [], "accuracy": {"relative_pct": null}})",
                "bad worker result: accuracy.relative_pct: expected a number, got null"},
           Case{R"({"ok": true, "peak_memory_bytes": "8G"})", "bad worker result: peak_memory_bytes: expected an integer, got string"},
           Case{R"({"ok": false, "plans": [{"shape": "x"}]})", "bad worker result: plans[0].op: missing"},
           Case{R"({"ok": true, "tiers": [], "accuracy": {"relative_pct": 1}, "quantization": {"method": "gptq", "solver": "tpu"}})",
                "bad worker result: quantization.solver: 'tpu' is not one of cpu, cuda"},
       }) {
    Result<WorkerResult> r = parse_worker_output(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().message, c.message) << c.text;
  }
}

TEST(WorkerResult, LongStringsAreCutOnACharacterBoundary) {
  WorkerResult r;
  r.error.message = std::string(kMaxResultString - 1, 'x') + "\xC3\xA9" + "tail";
  Result<WorkerResult> back = parse_worker_output(to_json(r));
  ASSERT_TRUE(back.ok()) << back.status().message;
  const std::string& m = back.value().error.message;
  EXPECT_EQ(m.substr(0, kMaxResultString - 1), std::string(kMaxResultString - 1, 'x'));
  EXPECT_EQ(m.substr(kMaxResultString - 1, 1), " ");   // the two-byte character did not fit: left out whole
  EXPECT_EQ(valid_utf8(m), m);
}

// 4 MB of lines that each open an object which runs on into the next line ("[0," then "{" is valid JSON): each
// line tried as the start of the result parsed to the end of the text, quadratic in the line count (hours for
// the daemon). Only the last kMaxResultLineTries lines are tried; a result after such lines still reads.
TEST(WorkerResult, ManyLinesOpeningObjectsCostLinearTime) {
  std::string junk;
  while (junk.size() < (4u << 20)) junk += "{\"a\":[0,\n";
  const auto t0 = std::chrono::steady_clock::now();
  Result<WorkerResult> r = parse_worker_output(junk);
  EXPECT_FALSE(r.ok());
  Result<WorkerResult> good = parse_worker_output(junk + to_json(full_result()) + "\n");
  ASSERT_TRUE(good.ok()) << good.status().message;
  EXPECT_EQ(to_json(good.value()), to_json(full_result()));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 60.0) << "quadratic again? (linear takes about a second)";
}

TEST(Utf8, InvalidBytesAreReplacedAndCutsKeepCharactersWhole) {
  EXPECT_EQ(valid_utf8("ok caf\xC3\xA9"), "ok caf\xC3\xA9");
  EXPECT_EQ(valid_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(valid_utf8("\xC3"), "\xEF\xBF\xBD");                   // truncated sequence
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");   // overlong
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");   // surrogate
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(utf8_prefix("a\xC3\xA9" "b", 2), "a");
  EXPECT_EQ(utf8_prefix("a\xC3\xA9" "b", 3), "a\xC3\xA9");
  EXPECT_EQ(utf8_prefix("\xF0\x9F\x98\x80", 3), "");
  EXPECT_EQ(utf8_suffix("a\xC3\xA9" "b", 2), "b");
  EXPECT_EQ(utf8_suffix("a\xC3\xA9" "b", 3), "\xC3\xA9" "b");
}

TEST(FailureKinds, NamesRoundTripAndSayWhatIsAboutTheConfig) {
  for (int i = 0; i <= static_cast<int>(FailureKind::kUnknown); ++i) {
    const FailureKind k = static_cast<FailureKind>(i);
    EXPECT_EQ(failure_kind_from_string(to_string(k)), k) << to_string(k);
  }
  EXPECT_FALSE(failure_kind_from_string("out of memory").has_value());
  EXPECT_TRUE(is_about_the_config(FailureKind::kOutOfMemory));
  EXPECT_TRUE(is_about_the_config(FailureKind::kInvalidConfig));
  EXPECT_TRUE(is_about_the_config(FailureKind::kTimeout));
  EXPECT_FALSE(is_about_the_config(FailureKind::kRestart));
  EXPECT_FALSE(is_about_the_config(FailureKind::kCancelled));
  EXPECT_FALSE(is_about_the_config(FailureKind::kNone));
}

}  // namespace
}  // namespace soartune
