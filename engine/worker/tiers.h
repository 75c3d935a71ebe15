// Closed-loop load at a fixed client concurrency: N clients each send their next request as soon as their
// previous one finishes (N = 0: every request at t = 0). Durations and per-request latencies come from
// the engine clock.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/metrics.h"
#include "engine/workload.h"

namespace soartune::engine::worker {

struct TierResult {
  std::string tier;              // "c1", "c8", "cinf"
  int concurrency = 0;
  double duration_s = 0;
  int requests = 0;
  int64_t output_tokens = 0;
  Percentiles ttft_ms, tpot_ms;
  double output_tokens_per_s = 0;
};

std::string tier_name(int concurrency);
Result<TierResult> run_tier(Engine& engine, const std::vector<WorkloadRequest>& requests, int concurrency);

}  // namespace soartune::engine::worker
