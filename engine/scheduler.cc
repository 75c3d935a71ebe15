#include "engine/scheduler.h"

#include <algorithm>
#include <string>

namespace soartune::engine {

Scheduler::Scheduler(SchedulerConfig config, int kv_pages) : config_(config), allocator_(kv_pages) {
  for (int s = config_.max_running_requests - 1; s >= 0; --s) free_slots_.push_back(s);
  running_.reserve(static_cast<std::size_t>(config_.max_running_requests));
}

Status Scheduler::add(std::unique_ptr<Sequence> seq) {
  if (seq->prompt_len <= 0 || seq->prompt_len > static_cast<int>(seq->tokens.size()))
    return Status::Invalid("request: prompt is empty");
  if (!seq->teacher_forced() && seq->max_new_tokens < 1) return Status::Invalid("request: output_len must be at least 1");
  const int need = pages_for(seq->kv_tokens(), config_.page_size);
  if (need > allocator_.total_pages())
    return Status::Exhausted("request " + std::to_string(seq->id) + ": needs " + std::to_string(need) + " KV pages of " +
                             std::to_string(config_.page_size) + " tokens; the pool has " + std::to_string(allocator_.total_pages()));
  waiting_.push_back(std::move(seq));
  return Status::Ok();
}

void Scheduler::schedule(Batch* batch) {
  batch->chunks.clear();
  batch->decode_tokens = batch->prefill_tokens = batch->started = 0;
  for (auto& s : running_) {
    if (!s->prefilling()) {
      batch->chunks.push_back({s.get(), s->cached, 1, true});
      ++batch->decode_tokens;
    }
  }
  int budget = config_.max_prefill_tokens;
  for (auto& s : running_) {
    if (budget == 0) break;
    if (s->prefilling()) {
      const int len = std::min(budget, s->prompt_len - s->cached);
      batch->chunks.push_back({s.get(), s->cached, len, false});
      batch->prefill_tokens += len;
      budget -= len;
    }
  }
  while (budget > 0 && !waiting_.empty() && running() < config_.max_running_requests &&
         (config_.prefill_max_requests == 0 || batch->started < config_.prefill_max_requests)) {
    Sequence* s = waiting_.front().get();
    if (!allocator_.allocate(pages_for(s->kv_tokens(), config_.page_size), &s->pages)) break;  // FIFO: wait for pages
    s->slot = free_slots_.back();
    free_slots_.pop_back();
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    const int len = std::min(budget, s->prompt_len - s->cached);
    batch->chunks.push_back({s, s->cached, len, false});
    batch->prefill_tokens += len;
    budget -= len;
    ++batch->started;
  }
}

void Scheduler::complete(const Batch& batch) {
  for (const auto& c : batch.chunks) c.seq->cached += c.len;
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->done()) {
      allocator_.release(&(*it)->pages);
      free_slots_.push_back((*it)->slot);
      (*it)->slot = -1;
      finished_.push_back(std::move(*it));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::unique_ptr<Sequence>> Scheduler::take_finished() {
  std::vector<std::unique_ptr<Sequence>> out;
  out.swap(finished_);
  return out;
}

}  // namespace soartune::engine
