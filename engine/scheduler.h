// Continuous batching. Requests wait in a FIFO queue; each step the scheduler
//   1. gives every running sequence that is generating one decode token,
//   2. spends the prefill budget (max_prefill_tokens) on sequences part-way through their prompt (chunked
//      prefill), then admits waiting requests in arrival order while fewer than max_running_requests run,
//      at most prefill_max_requests start this step (0: no limit), budget is left, and the KV pool holds
//      the request's whole footprint (prompt + output, reserved at admission, so a running sequence never
//      runs out of pages and nothing is ever preempted).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/kv_cache.h"
#include "core/status.h"

namespace soartune::engine {

struct SchedulerConfig {
  int max_running_requests = 64;
  int max_prefill_tokens = 2048;
  int prefill_max_requests = 0;
  int page_size = 16;
};

// A request as the engine tracks it from arrival to completion.
struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;      // prompt, then each generated token as it is produced
  int prompt_len = 0;               // tokens that are prefilled (teacher forcing: prompt + continuation[:-1])
  int max_new_tokens = 0;           // tokens to generate (fixed length, ignore_eos); 0 for teacher forcing
  int score_from = -1;              // teacher forcing: first position whose next-token argmax is an output
  int cached = 0;                   // tokens whose K/V are in the cache
  int slot = -1;                    // backend sequence slot while running
  std::vector<int32_t> pages;       // block table
  std::vector<int32_t> outputs;     // generated tokens, or the teacher-forced argmax per scored position
  double arrival_s = 0;             // engine clock
  std::vector<double> token_s;      // time each output token was produced

  bool teacher_forced() const { return score_from >= 0; }
  bool prefilling() const { return cached < prompt_len; }
  bool done() const { return teacher_forced() ? cached == prompt_len : static_cast<int>(outputs.size()) == max_new_tokens; }
  int kv_tokens() const { return teacher_forced() ? prompt_len : prompt_len + max_new_tokens - 1; }
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int start = 0;                    // first position fed this step (== seq->cached before the step)
  int len = 0;                      // tokens fed
  bool decode = false;
};

struct Batch {
  std::vector<ScheduledChunk> chunks;   // decode chunks first, then prefill chunks
  int decode_tokens = 0;
  int prefill_tokens = 0;
  int started = 0;                      // requests admitted this step
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, int kv_pages);

  // Queues a request. Fails when it can never fit: more KV pages than the whole pool.
  Status add(std::unique_ptr<Sequence> seq);
  // The next step's work into *batch (cleared first). Empty only when nothing is waiting or running.
  void schedule(Batch* batch);
  // After the step ran and the engine appended its outputs: advances `cached`, retires finished sequences.
  void complete(const Batch& batch);

  std::vector<std::unique_ptr<Sequence>> take_finished();
  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const SchedulerConfig& config() const { return config_; }
  const PageAllocator& pages() const { return allocator_; }

 private:
  SchedulerConfig config_;
  PageAllocator allocator_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;   // in admission order
  std::vector<std::unique_ptr<Sequence>> finished_;
  std::vector<int> free_slots_;
};

}  // namespace soartune::engine
