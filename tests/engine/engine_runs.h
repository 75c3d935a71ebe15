// Runs of the CPU engine that the engine tests compare with references: one sequence's logits through the
// backend, an engine for batched runs, teacher-forced top-1 and greedy continuations of reference rows
// (prompt_ids, continuation_ids, ...), and how often two runs agree.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/engine.h"
#include "single_sequence.h"
#include "tiny_model.h"

namespace soartune::engine::testing {

// Every position's logits [ids][vocab] of one sequence through the CPU backend (2 threads, fp32 KV cache) under
// `launch`, fed `chunk` tokens a prefill step (0: the whole sequence in one step).
inline std::vector<float> cpu_logits(const ModelWeights& w, const std::vector<int32_t>& ids, LaunchConfig launch = {}, int chunk = 0) {
  launch.kv_cache_dtype = KvCacheDtype::kFP32;
  const int n = static_cast<int>(ids.size());
  SingleSequence run(make_cpu_backend(2), w, launch, /*slot=*/0, n);
  return run.feed_steps(ids, n, chunk > 0 ? chunk : n);
}

// An engine on the CPU backend (`threads`, 0: its default) under `launch`; null after a test failure.
inline std::unique_ptr<Engine> cpu_engine(const ModelWeights& w, const LaunchConfig& launch, int max_context = 256, int threads = 0) {
  EngineOptions o;
  o.launch = launch;
  o.max_context = max_context;
  auto e = Engine::create(make_cpu_backend(threads), w, o);
  EXPECT_TRUE(e.ok()) << e.status().message;
  return e.ok() ? std::move(e).value() : nullptr;
}

// The same with an fp32 KV cache, `max_running` sequences at once and `max_prefill` tokens a step: the engine
// the fp32 references are compared with.
inline std::unique_ptr<Engine> fp32_engine(const ModelWeights& w, int max_running, int max_prefill, int max_context = 256) {
  LaunchConfig l;
  l.kv_cache_dtype = KvCacheDtype::kFP32;
  l.max_running_requests = max_running;
  l.max_prefill_tokens = max_prefill;
  return cpu_engine(w, l, max_context);
}

// The outputs of every request `add` queued on `e`, run to the end, by request (= row) order.
template <typename Add>
std::vector<std::vector<int32_t>> run_rows(Engine& e, const std::vector<nlohmann::json>& rows, Add add) {
  for (const auto& r : rows) EXPECT_TRUE(add(r).ok());
  EXPECT_TRUE(e.run_until_idle().ok());
  auto done = e.take_finished();
  EXPECT_EQ(done.size(), rows.size());
  std::vector<std::vector<int32_t>> out(rows.size());
  for (auto& f : done)
    if (f.id >= 0 && static_cast<std::size_t>(f.id) < out.size()) out[static_cast<std::size_t>(f.id)] = std::move(f.output);
  return out;
}

// The teacher-forced argmax at every continuation position of each row.
inline std::vector<std::vector<int32_t>> teacher_forced_top1(Engine& e, const std::vector<nlohmann::json>& rows) {
  return run_rows(e, rows, [&](const nlohmann::json& r) {
    return e.add_teacher_forced(r["prompt_ids"].get<std::vector<int32_t>>(), r["continuation_ids"].get<std::vector<int32_t>>());
  });
}

// Greedy continuations of each row's prompt, as many tokens as the row's `field` (its reference) holds.
inline std::vector<std::vector<int32_t>> greedy_continuations(Engine& e, const std::vector<nlohmann::json>& rows, const char* field) {
  return run_rows(e, rows, [&](const nlohmann::json& r) {
    return e.add_request(r["prompt_ids"].get<std::vector<int32_t>>(), static_cast<int>(r[field].size()));
  });
}

// Each row's `field` as tokens.
inline std::vector<std::vector<int32_t>> field_of(const std::vector<nlohmann::json>& rows, const char* field) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : rows) out.push_back(r[field].get<std::vector<int32_t>>());
  return out;
}

// Positions at which two runs of the same rows agree; rows of different lengths fail the test.
struct Agreement {
  int64_t same = 0, positions = 0;
  double pct() const { return positions ? 100.0 * static_cast<double>(same) / static_cast<double>(positions) : 0.0; }
};

inline Agreement agreement(const std::vector<std::vector<int32_t>>& a, const std::vector<std::vector<int32_t>>& b) {
  Agreement g;
  EXPECT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size()) << "row " << i;
    for (std::size_t k = 0; k < std::min(a[i].size(), b[i].size()); ++k) g.same += a[i][k] == b[i][k];
    g.positions += static_cast<int64_t>(b[i].size());
  }
  return g;
}

// Teacher-forced top-1 of `rows` on fp32_engine(w, 16, 1024, max_context) against each row's `field`, printed.
inline Agreement fp32_top1_agreement(const ModelWeights& w, const std::vector<nlohmann::json>& rows, const char* field,
                                     int max_context = 256) {
  auto engine = fp32_engine(w, 16, 1024, max_context);
  if (!engine) return {};
  const Agreement a = agreement(teacher_forced_top1(*engine, rows), field_of(rows, field));
  std::printf("teacher-forced fp32 top-1 agreement: %.3f%% of %lld positions\n", a.pct(), static_cast<long long>(a.positions));
  return a;
}

// Teacher-forced top-1 of the shared tiny model's first `passages` rows of eval_public.jsonl, all at once, under
// `launch` (its weights already quantised as `launch` says).
inline std::vector<std::vector<int32_t>> tiny_model_top1(const ModelWeights& w, LaunchConfig launch, int passages) {
  launch.max_running_requests = passages;
  auto rows = read_jsonl(tiny_model_dir() + "/eval_public.jsonl");
  EXPECT_GE(rows.size(), static_cast<std::size_t>(passages));
  rows.resize(std::min(rows.size(), static_cast<std::size_t>(passages)));
  auto e = cpu_engine(w, launch);
  return e ? teacher_forced_top1(*e, rows) : std::vector<std::vector<int32_t>>(rows.size());
}

}  // namespace soartune::engine::testing
