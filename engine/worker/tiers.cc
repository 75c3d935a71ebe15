#include "engine/worker/tiers.h"

#include <algorithm>

namespace soartune::engine::worker {

std::string tier_name(int concurrency) { return concurrency == 0 ? "cinf" : "c" + std::to_string(concurrency); }

Result<TierResult> run_tier(Engine& e, const std::vector<WorkloadRequest>& requests, int concurrency) {
  TierResult r;
  r.tier = tier_name(concurrency);
  r.concurrency = concurrency;
  const std::size_t total = requests.size();
  const std::size_t clients = concurrency == 0 ? total : std::min<std::size_t>(total, static_cast<std::size_t>(concurrency));
  std::vector<double> ttft, tpot;
  std::size_t next = 0;
  const double t0 = e.now();
  double last_finish = t0;
  auto submit = [&]() -> Status {
    const WorkloadRequest& q = requests[next++];
    auto id = e.add_request(q.prompt, q.output_len);
    return id.ok() ? Status::Ok() : id.status();
  };
  for (std::size_t i = 0; i < clients; ++i)
    if (Status s = submit(); !s.ok()) return s;
  while (!e.idle()) {
    if (Status s = e.step(); !s.ok()) return s;
    for (auto& f : e.take_finished()) {
      ++r.requests;
      r.output_tokens += static_cast<int64_t>(f.output.size());
      if (!f.token_s.empty()) {
        ttft.push_back(1000.0 * (f.token_s.front() - f.arrival_s));
        if (f.token_s.size() > 1)
          tpot.push_back(1000.0 * (f.token_s.back() - f.token_s.front()) / static_cast<double>(f.token_s.size() - 1));
        last_finish = std::max(last_finish, f.token_s.back());
      }
      if (next < total)
        if (Status s = submit(); !s.ok()) return s;
    }
  }
  r.duration_s = last_finish - t0;
  r.ttft_ms = summarize(ttft);
  r.tpot_ms = summarize(tpot);
  r.output_tokens_per_s = r.duration_s > 0 ? static_cast<double>(r.output_tokens) / r.duration_s : 0;
  return r;
}

}  // namespace soartune::engine::worker
