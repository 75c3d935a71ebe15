// One sequence driven through a Backend directly (no scheduler), so that every position's logits can be read
// back: a decode step by step against one prefill, or one backend against another on the same tokens. Shared
// by the CPU reference tests and the CUDA engine tests (tests/kernels/*_gpu_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend.h"

namespace soartune::engine::testing {

// n pseudo-random token ids in [2, 2 + modulus) (a linear congruential sequence from `seed`): a prompt that is
// the same on every machine.
inline std::vector<int32_t> random_ids(int n, uint32_t seed, int modulus) {
  std::vector<int32_t> ids;
  uint32_t x = seed;
  for (int i = 0; i < n; ++i) ids.push_back(2 + static_cast<int32_t>((x = x * 1103515245u + 12345u) >> 8) % modulus);
  return ids;
}

class SingleSequence {
 public:
  // A plan of two sequence slots (the sequence takes `slot`), steps of up to max_step_tokens tokens (0:
  // max_context), every row an output row.
  SingleSequence(std::unique_ptr<Backend> backend, const ModelWeights& w, const LaunchConfig& l, int slot,
                 int max_context, int max_step_tokens = 0)
      : c_(w.config), slot_(slot), backend_(std::move(backend)) {
    EXPECT_TRUE(backend_) << "no backend";
    if (!backend_) return;
    BackendPlan plan;
    plan.weights = &w;
    plan.launch = l;
    plan.max_sequences = 2;
    plan.max_step_tokens = max_step_tokens > 0 ? max_step_tokens : max_context;
    plan.max_output_rows = plan.max_step_tokens;
    plan.max_context = max_context;
    const Status s = backend_->prepare(plan);
    EXPECT_TRUE(s.ok()) << s.message;
    ok_ = s.ok();
    for (int p = 0; ok_ && p < backend_->kv_pages(); ++p) pages_.push_back(p);
  }

  // Whether prepare() succeeded.
  bool ok() const { return ok_; }

  // Feeds tokens at positions pos0.. (after pos0 tokens already fed), returning every row's logits [T][vocab];
  // empty when the step fails. residual: [layers + 1][T][hidden], when given (the CPU backend fills it).
  std::vector<float> feed(const std::vector<int32_t>& tokens, int pos0, std::vector<float>* residual = nullptr) {
    if (!ok_) return {};
    const int T = static_cast<int>(tokens.size());
    std::vector<int32_t> positions(static_cast<std::size_t>(T)), rows(static_cast<std::size_t>(T)), argmax(static_cast<std::size_t>(T));
    for (int t = 0; t < T; ++t) positions[static_cast<std::size_t>(t)] = pos0 + t, rows[static_cast<std::size_t>(t)] = t;
    StepSequence seq{slot_, 0, T, pos0, std::span<const int32_t>(pages_)};
    Step step{tokens, positions, std::span<const StepSequence>(&seq, 1), rows, pos0 > 0 && T == 1 ? 1 : 0};
    std::vector<float> logits(static_cast<std::size_t>(T) * c_.vocab);
    if (residual) residual->assign(static_cast<std::size_t>(c_.layers + 1) * T * c_.hidden, 0.f);
    StepOutput out{argmax, logits, residual ? std::span<float>(*residual) : std::span<float>()};
    const Status s = backend_->forward(step, out);
    EXPECT_TRUE(s.ok()) << s.message;
    if (!s.ok()) return {};
    return logits;
  }

  // ids from position 0: the first prompt_len in steps of up to `chunk` tokens, then one token a step (decode
  // steps); every row's logits [ids.size()][vocab], empty when a step fails.
  std::vector<float> feed_steps(const std::vector<int32_t>& ids, int prompt_len, int chunk) {
    std::vector<float> all;
    all.reserve(ids.size() * static_cast<std::size_t>(c_.vocab));
    const int n = static_cast<int>(ids.size());
    for (int pos0 = 0; pos0 < n;) {
      const int T = pos0 < prompt_len ? std::min(chunk, prompt_len - pos0) : 1;
      const std::vector<float> logits = feed(std::vector<int32_t>(ids.begin() + pos0, ids.begin() + pos0 + T), pos0);
      if (logits.empty()) return {};
      all.insert(all.end(), logits.begin(), logits.end());
      pos0 += T;
    }
    return all;
  }

  Backend& backend() { return *backend_; }

 private:
  ModelConfig c_;
  int slot_ = 0;
  std::unique_ptr<Backend> backend_;
  bool ok_ = false;
  std::vector<int32_t> pages_;
};

}  // namespace soartune::engine::testing
