#include "engine/scheduler.h"

#include <random>

#include <gtest/gtest.h>

#include "engine/kv_cache.h"
#include "engine/metrics.h"

namespace soartune::engine {
namespace {

TEST(PageAllocator, ReportsOutOfPagesAndTakesNothing) {
  PageAllocator a(5);
  std::vector<int32_t> x, y;
  EXPECT_TRUE(a.allocate(3, &x));
  EXPECT_FALSE(a.allocate(3, &y));
  EXPECT_TRUE(y.empty());
  EXPECT_EQ(a.free_pages(), 2);
  a.release(&x);
  EXPECT_TRUE(x.empty());
  EXPECT_EQ(a.free_pages(), 5);
  EXPECT_TRUE(a.allocate(5, &y));
}

// Drives the scheduler as the engine does (the "model" emits token 7) over random request mixes.
void check_invariants(const SchedulerConfig& cfg, int pages, uint64_t seed) {
  Scheduler s(cfg, pages);
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_int_distribution<int> in(1, 90), out(1, 20);
  const int n = 40;
  for (int i = 0; i < n; ++i) {
    auto q = std::make_unique<Sequence>();
    q->id = i;
    q->prompt_len = in(rng);
    q->tokens.assign(static_cast<std::size_t>(q->prompt_len), 3);
    q->max_new_tokens = out(rng);
    ASSERT_TRUE(s.add(std::move(q)).ok());
  }
  Batch b;
  std::vector<std::unique_ptr<Sequence>> done;
  for (int steps = 0; !s.idle(); ++steps) {
    ASSERT_LT(steps, 100000);
    s.schedule(&b);
    ASSERT_FALSE(b.empty());
    EXPECT_LE(s.running(), cfg.max_running_requests);
    EXPECT_LE(b.prefill_tokens, cfg.max_prefill_tokens);
    if (cfg.prefill_max_requests) EXPECT_LE(b.started, cfg.prefill_max_requests);
    std::vector<int> slots;
    for (const auto& c : b.chunks) {
      EXPECT_EQ(c.start, c.seq->cached);
      EXPECT_GE(static_cast<int>(c.seq->pages.size()) * cfg.page_size, c.start + c.len);
      slots.push_back(c.seq->slot);
      EXPECT_GE(c.seq->slot, 0);
      EXPECT_LT(c.seq->slot, cfg.max_running_requests);
      // The engine's part: the last prompt token and every decode token yield one output token.
      if (c.decode || c.start + c.len == c.seq->prompt_len) {
        c.seq->outputs.push_back(7);
        c.seq->tokens.push_back(7);
      }
    }
    std::sort(slots.begin(), slots.end());
    EXPECT_EQ(std::adjacent_find(slots.begin(), slots.end()), slots.end()) << "two sequences share a slot";
    s.complete(b);
    for (auto& f : s.take_finished()) done.push_back(std::move(f));
  }
  ASSERT_EQ(static_cast<int>(done.size()), n);
  for (const auto& f : done) {
    EXPECT_EQ(static_cast<int>(f->outputs.size()), f->max_new_tokens);
    EXPECT_EQ(f->cached, f->prompt_len + f->max_new_tokens - 1);
  }
  EXPECT_EQ(s.pages().free_pages(), pages);
}

TEST(Scheduler, InvariantsHoldAcrossConfigs) {
  check_invariants({4, 32, 0, 16}, 64, 1);
  check_invariants({1, 16, 0, 8}, 32, 2);
  check_invariants({16, 256, 2, 32}, 40, 3);
  check_invariants({8, 2048, 1, 16}, 12, 4);   // a tight pool: admission waits for pages
}

TEST(Scheduler, ChunksLongPromptsUnderTheBudget) {
  Scheduler s({4, 32, 0, 16}, 64);
  auto q = std::make_unique<Sequence>();
  q->prompt_len = 100;
  q->tokens.assign(100, 1);
  q->max_new_tokens = 2;
  ASSERT_TRUE(s.add(std::move(q)).ok());
  Batch b;
  std::vector<int> chunks;
  while (true) {
    s.schedule(&b);
    if (b.chunks.empty() || b.chunks[0].decode) break;
    chunks.push_back(b.chunks[0].len);
    if (b.chunks[0].start + b.chunks[0].len == 100) b.chunks[0].seq->outputs.push_back(1), b.chunks[0].seq->tokens.push_back(1);
    s.complete(b);
  }
  EXPECT_EQ(chunks, (std::vector<int>{32, 32, 32, 4}));
}

TEST(Scheduler, RejectsARequestLargerThanThePool) {
  Scheduler s({4, 32, 0, 16}, 2);
  auto q = std::make_unique<Sequence>();
  q->prompt_len = 40;
  q->tokens.assign(40, 1);
  q->max_new_tokens = 1;
  const Status st = s.add(std::move(q));
  EXPECT_EQ(st.code, Code::kResourceExhausted);
}

TEST(Metrics, PercentilesInterpolate) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 50), 2);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({0, 10}, 90), 9);
  const Percentiles p = summarize({5});
  EXPECT_EQ(p.p99, 5);
}

}  // namespace
}  // namespace soartune::engine
