#include "daemon/scored_snapshots.h"

#include <algorithm>

namespace soartune::daemon {

std::shared_ptr<const ScoredTrials> ScoredSnapshots::find(const std::string& job_id, uint64_t revision) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.job_id == job_id; });
  if (it == entries_.end() || it->revision != revision) return nullptr;
  entries_.splice(entries_.begin(), entries_, it);
  return it->trials;
}

void ScoredSnapshots::put(const std::string& job_id, uint64_t revision, std::shared_ptr<const ScoredTrials> trials) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.job_id == job_id; });
  if (it != entries_.end()) {
    // Two readers may load the same job at once; the later revision stays.
    if (it->revision > revision) return;
    entries_.erase(it);
  }
  entries_.push_front(Entry{job_id, revision, std::move(trials)});
  while (entries_.size() > capacity_) entries_.pop_back();
}

void ScoredSnapshots::erase(const std::string& job_id) {
  std::lock_guard<std::mutex> l(mu_);
  entries_.remove_if([&](const Entry& e) { return e.job_id == job_id; });
}

size_t ScoredSnapshots::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.size();
}

}  // namespace soartune::daemon
