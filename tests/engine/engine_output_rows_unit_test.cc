// The logit rows an engine reserves for a step: every token of the prefill budget when teacher-forced requests
// may score any length, max_running_requests x the longest scored continuation when the caller says it
// (EngineOptions::max_scored_tokens, set by the worker from its accuracy set), with the same outputs.
#include <algorithm>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model_loader.h"

namespace soartune::engine {
namespace {

std::vector<int32_t> prompt_of(int len, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(1 + (salt * 131 + 97 * i) % 250);
  return p;
}

// Two teacher-forced requests and one generated one through an engine with a 1024-token prefill budget.
std::vector<std::vector<int32_t>> run(Engine& e) {
  EXPECT_TRUE(e.add_teacher_forced(prompt_of(300, 1), prompt_of(8, 2)).ok());
  EXPECT_TRUE(e.add_request(prompt_of(200, 3), 6).ok());
  EXPECT_TRUE(e.add_teacher_forced(prompt_of(120, 4), prompt_of(5, 5)).ok());
  Status s = e.run_until_idle();
  EXPECT_TRUE(s.ok()) << s.message;
  std::vector<FinishedRequest> done = e.take_finished();
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::vector<std::vector<int32_t>> out;
  for (const FinishedRequest& f : done) out.push_back(f.output);
  return out;
}

TEST(EngineOutputRows, AStatedLongestContinuationBoundsTheLogitRowsAndChangesNoOutput) {
  auto w = load_model("synthetic:tiny", 3);
  ASSERT_TRUE(w.ok()) << w.status().message;
  EngineOptions o;
  o.launch.kv_cache_dtype = KvCacheDtype::kFP32;
  o.launch.max_running_requests = 4;
  o.launch.max_prefill_tokens = 1024;
  o.max_context = 512;
  auto any = Engine::create(make_cpu_backend(2), w.value(), o);
  ASSERT_TRUE(any.ok()) << any.status().message;
  EXPECT_EQ(any.value()->max_output_rows(), 1024 + 4);
  const auto expected = run(*any.value());
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_EQ(expected[0].size(), 8u);
  EXPECT_EQ(expected[1].size(), 6u);
  EXPECT_EQ(expected[2].size(), 5u);

  o.max_scored_tokens = 8;
  auto bounded = Engine::create(make_cpu_backend(2), w.value(), o);
  ASSERT_TRUE(bounded.ok()) << bounded.status().message;
  EXPECT_EQ(bounded.value()->max_output_rows(), 4 * 8);
  // The CPU backend refuses a step with more rows than it was prepared for: the same outputs here mean every
  // step fitted the bound.
  EXPECT_EQ(run(*bounded.value()), expected);

  // A longer continuation than stated is refused, naming the bound; the engine goes on serving.
  auto r = bounded.value()->add_teacher_forced(prompt_of(10, 6), prompt_of(9, 7));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message.find("max_scored_tokens 8"), std::string::npos) << r.status().message;
  EXPECT_TRUE(bounded.value()->idle());

  // Generation only (a proxy-accuracy trial's timed model): one row a running sequence.
  o.max_scored_tokens = 0;
  auto gen = Engine::create(make_cpu_backend(2), w.value(), o);
  ASSERT_TRUE(gen.ok()) << gen.status().message;
  EXPECT_EQ(gen.value()->max_output_rows(), 4);
}

}  // namespace
}  // namespace soartune::engine
