// Scored trials of the jobs no runner of this daemon holds (finished before it started, or never resumed), kept
// between reads. Scores are relative to the job's best durations, so serving such a job means reading and
// scoring every trial; doing that once per store revision of the job (Store::trials_revision) instead of once
// per request makes a page of ListTrials, a GetJob or a GetTrial cost what it returns, not the whole job.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "daemon/scored_trials.h"

namespace soartune::daemon {

class ScoredSnapshots {
 public:
  // At most `capacity` jobs are kept; the one read longest ago goes first.
  explicit ScoredSnapshots(size_t capacity = 16) : capacity_(capacity) {}

  // The job's snapshot taken at `revision`, or nullptr when none is kept (or it is of another revision).
  std::shared_ptr<const ScoredTrials> find(const std::string& job_id, uint64_t revision);
  // Keeps `trials` as the job's snapshot at `revision` (replacing an older one).
  void put(const std::string& job_id, uint64_t revision, std::shared_ptr<const ScoredTrials> trials);
  // Drops the job's snapshot (a runner now holds the job).
  void erase(const std::string& job_id);
  size_t size() const;

 private:
  struct Entry {
    std::string job_id;
    uint64_t revision = 0;
    std::shared_ptr<const ScoredTrials> trials;
  };
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;   // most recently read first
};

}  // namespace soartune::daemon
