// The worker's progress lines as the daemon reads them: untrusted input, every field type-checked, a wrong shape
// an error naming the field, anything that is not a progress line (logs, the result, garbage) nothing at all; and
// the result line is still read as before when progress lines come first.
#include "core/worker_progress.h"

#include <string>

#include <gtest/gtest.h>

namespace soartune {
namespace {

WorkerProgress sample(int tiers) {
  WorkerProgress p;
  p.accuracy.metric = "fidelity";
  p.accuracy.relative_pct = 97.5;
  p.accuracy.positions = 64;
  p.elapsed_s = 3.25;
  const char* names[] = {"c1", "c8", "cinf"};
  for (int i = 0; i < tiers; ++i) {
    TierMeasurement t;
    t.tier = names[i];
    t.concurrency = i == 0 ? 1 : i == 1 ? 8 : 0;
    t.duration_s = 1.5 + i;
    t.requests = 4;
    t.output_tokens = 32;
    t.ttft_ms = {1, 2, 3};
    p.tiers.push_back(t);
  }
  p.stage = tiers == 0 ? "accuracy" : names[tiers - 1];
  return p;
}

std::string error_of(const std::string& line) {
  Result<std::optional<WorkerProgress>> r = parse_worker_progress(line);
  return r.ok() ? "" : r.status().message;
}

TEST(WorkerProgress, RoundTripsEveryStage) {
  for (int k = 0; k <= 3; ++k) {
    const WorkerProgress p = sample(k);
    Result<std::optional<WorkerProgress>> r = parse_worker_progress(to_json(p));
    ASSERT_TRUE(r.ok()) << r.status().message;
    ASSERT_TRUE(r.value().has_value());
    const WorkerProgress& q = *r.value();
    EXPECT_EQ(q.stage, p.stage);
    EXPECT_DOUBLE_EQ(q.accuracy.relative_pct, 97.5);
    EXPECT_EQ(q.accuracy.metric, "fidelity");
    EXPECT_DOUBLE_EQ(q.elapsed_s, 3.25);
    ASSERT_EQ(q.tiers.size(), static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(q.tiers[i].tier, p.tiers[i].tier);
      EXPECT_DOUBLE_EQ(q.tiers[i].duration_s, p.tiers[i].duration_s);
      EXPECT_EQ(q.tiers[i].concurrency, p.tiers[i].concurrency);
      EXPECT_DOUBLE_EQ(q.tiers[i].ttft_ms.p90, 2);
    }
  }
}

TEST(WorkerProgress, LinesThatAreNotProgressAreNothing) {
  WorkerResult result;
  result.ok = true;
  result.tiers = sample(3).tiers;
  result.accuracy.relative_pct = 100;
  for (const std::string& line :
       {std::string(""), std::string("   "), std::string("[info] loading model"), std::string("{not json progress"),
        std::string("{\"progress\": "), std::string("[\"progress\"]"), std::string("\"progress\""),
        std::string("{\"ok\": true, \"note\": \"progress\"}"), to_json(result),
        std::string("{\"progress\": 1e99999}"),          // out of range: not JSON nlohmann accepts
        std::string("{\"progress\": {\"stage\": \"\xff\xfe\"}}"),   // invalid UTF-8: not JSON
        std::string("{\"progress\": NaN}")}) {
    Result<std::optional<WorkerProgress>> r = parse_worker_progress(line);
    ASSERT_TRUE(r.ok()) << line << ": " << r.status().message;
    EXPECT_FALSE(r.value().has_value()) << line;
  }
  // Past the cap a line is not read at all, whatever it holds.
  std::string long_line = to_json(sample(1));
  long_line.insert(long_line.size() - 2, ", \"pad\": \"" + std::string(kMaxProgressLineBytes, 'x') + "\"");
  Result<std::optional<WorkerProgress>> r = parse_worker_progress(long_line);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().has_value());
}

TEST(WorkerProgress, HostileShapesNameTheField) {
  const std::string acc = "\"accuracy\": {\"relative_pct\": 90}";
  auto line = [](const std::string& body) { return "{\"progress\": " + body + "}"; };
  EXPECT_EQ(error_of(line("[]")), "bad worker progress: progress: expected an object, got array");
  EXPECT_EQ(error_of(line("{" + acc + "}")), "bad worker progress: progress.stage: missing");
  EXPECT_EQ(error_of(line("{\"stage\": 7, " + acc + "}")), "bad worker progress: progress.stage: expected a string, got number");
  EXPECT_EQ(error_of(line("{\"stage\": \"accuracy\"}")), "bad worker progress: progress.accuracy: missing");
  EXPECT_EQ(error_of(line("{\"stage\": \"accuracy\", \"accuracy\": []}")),
            "bad worker progress: progress.accuracy: expected an object, got array");
  EXPECT_EQ(error_of(line("{\"stage\": \"accuracy\", \"accuracy\": {\"relative_pct\": \"high\"}}")),
            "bad worker progress: progress.accuracy.relative_pct: expected a number, got string");
  EXPECT_EQ(error_of(line("{\"stage\": \"accuracy\", \"accuracy\": {\"relative_pct\": -1}}")),
            "bad worker progress: progress.accuracy.relative_pct: negative");
  EXPECT_EQ(error_of(line("{\"stage\": \"c1\", " + acc + ", \"tiers\": {}}")),
            "bad worker progress: progress.tiers: expected an array, got object");
  EXPECT_EQ(error_of(line("{\"stage\": \"c1\", " + acc + ", \"tiers\": [3]}")),
            "bad worker progress: progress.tiers[0]: expected an object, got number");
  EXPECT_EQ(error_of(line("{\"stage\": \"c1\", " + acc + ", \"tiers\": [{\"tier\": \"c1\"}]}")),
            "bad worker progress: progress.tiers[0].duration_s: missing");
  EXPECT_EQ(error_of(line("{\"stage\": \"c1\", " + acc + ", \"tiers\": [{\"tier\": \"c1\", \"duration_s\": 0}]}")),
            "bad worker progress: progress.tiers[0].duration_s: not positive");
  EXPECT_EQ(error_of(line("{\"stage\": \"c1\", " + acc + ", \"tiers\": [{\"tier\": \"c1\", \"duration_s\": 1, "
                          "\"concurrency\": 1.5}]}")),
            "bad worker progress: progress.tiers[0].concurrency: expected an integer, got number");
  // The stage must say what was measured: "accuracy" with no tier, else the last tier's name.
  EXPECT_EQ(error_of(line("{\"stage\": \"c8\", " + acc + "}")),
            "bad worker progress: progress.stage: 'c8' is not 'accuracy' (no tier measured yet)");
  EXPECT_EQ(error_of(line("{\"stage\": \"accuracy\", " + acc + ", \"tiers\": [{\"tier\": \"c1\", \"duration_s\": 1}]}")),
            "bad worker progress: progress.stage: 'accuracy' is not 'c1' (the last tier measured)");
  std::string many = "[";
  for (size_t i = 0; i <= kMaxProgressTiers; ++i) many += std::string(i ? "," : "") + "{\"tier\": \"c1\", \"duration_s\": 1}";
  EXPECT_EQ(error_of(line("{\"stage\": \"c1\", " + acc + ", \"tiers\": " + many + "]}")),
            "bad worker progress: progress.tiers: 17 tiers, more than 16");
  // Long strings are kept capped and valid, as in the result.
  Result<std::optional<WorkerProgress>> r =
      parse_worker_progress(line("{\"stage\": \"accuracy\", \"accuracy\": {\"relative_pct\": 1, \"metric\": \"" +
                                 std::string(10000, 'm') + "\"}}"));
  ASSERT_TRUE(r.ok()) << r.status().message;
  EXPECT_LT(r.value()->accuracy.metric.size(), 4200u);
}

TEST(WorkerProgress, TheResultLineIsReadAsBeforeAndProgressIsNeverTheResult) {
  WorkerResult result;
  result.ok = true;
  result.tiers = sample(3).tiers;
  result.accuracy.relative_pct = 99;
  std::string out = "[log] start\n" + to_json(sample(0)) + "\n" + to_json(sample(1)) + "\n" + to_json(sample(2)) +
                    "\n" + to_json(sample(3)) + "\n" + to_json(result) + "\n";
  Result<WorkerResult> r = parse_worker_output(out);
  ASSERT_TRUE(r.ok()) << r.status().message;
  EXPECT_TRUE(r.value().ok);
  EXPECT_DOUBLE_EQ(r.value().accuracy.relative_pct, 99);
  // A worker that printed progress and died printed no result.
  Result<WorkerResult> none = parse_worker_output(to_json(sample(0)) + "\n" + to_json(sample(1)) + "\n");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message.find("garbage output"), std::string::npos) << none.status().message;
  EXPECT_FALSE(parse_worker_output(to_json(sample(2))).ok());
}

}  // namespace
}  // namespace soartune
