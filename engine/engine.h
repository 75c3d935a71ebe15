// The engine: ties the scheduler, the logical KV pages and a Backend into a serving loop. Requests go in
// with add_request() (generate output_len tokens greedily, fixed length) or add_teacher_forced() (report
// the argmax after every prefix of prompt + continuation); step() runs one scheduler step and one forward
// pass; take_finished() hands back completed requests with per-token timestamps on the engine clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "core/launch_config.h"
#include "engine/scheduler.h"
#include "core/status.h"
#include "engine/weights.h"

namespace soartune::engine {

struct EngineOptions {
  LaunchConfig launch;
  int max_context = 2048;          // longest prompt + output any request will have
  int kv_pages = 0;                // 0: the backend decides (see BackendPlan::kv_pages)
  // Longest continuation a teacher-forced request will score; -1: any. It bounds the logit rows of a step
  // (max_running_requests x it, instead of every token the prefill budget allows: 73448-wide fp32 rows are
  // 0.3 MB each, so a 131072-token budget would otherwise reserve 38 GB of logits that serving never needs).
  int max_scored_tokens = -1;
};

struct FinishedRequest {
  int64_t id = 0;
  int prompt_len = 0;
  std::vector<int32_t> output;     // generated tokens, or the teacher-forced argmax per scored position
  double arrival_s = 0;            // engine clock
  std::vector<double> token_s;     // when each output token was produced
};

struct StepStats {
  int running = 0;                 // sequences in the step
  int decode_tokens = 0;
  int prefill_tokens = 0;
  int started = 0;
};

class Engine {
 public:
  // Prepares `backend` with `weights` (which may be released afterwards).
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Backend> backend, const ModelWeights& weights,
                                                const EngineOptions& options);

  Result<int64_t> add_request(std::vector<int32_t> prompt, int output_len);
  Result<int64_t> add_teacher_forced(const std::vector<int32_t>& prompt, const std::vector<int32_t>& continuation);
  Status step();
  // Steps until every queued request has finished.
  Status run_until_idle();
  bool idle() const { return scheduler_->idle(); }
  std::vector<FinishedRequest> take_finished();

  double now() const;              // seconds since the engine was created
  const StepStats& last_step() const { return last_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  Backend& backend() { return *backend_; }
  const ModelConfig& model() const { return model_; }
  int max_output_rows() const { return max_output_rows_; }   // logit rows the backend holds for one step

 private:
  Engine() = default;
  Result<int64_t> enqueue(std::unique_ptr<Sequence> seq);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Scheduler> scheduler_;
  ModelConfig model_;
  EngineOptions options_;
  int64_t next_id_ = 0;
  int max_output_rows_ = 0;
  std::chrono::steady_clock::time_point epoch_;
  StepStats last_;
  // Step buffers, sized once in create().
  Batch batch_;
  std::vector<int32_t> tokens_, positions_, output_rows_, argmax_;
  std::vector<StepSequence> seqs_;
  std::vector<int> chunk_first_row_;   // per chunk: index of its first output row in argmax_
};

}  // namespace soartune::engine
