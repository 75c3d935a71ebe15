// A job's trials in memory, scored and counted as they change. Scores are relative to the best duration seen
// on each tier (or the spec's targets), so one trial can change every score: put() rescores the COMPLETE
// trials only when the new trial moves a reference duration, and scores just the new trial otherwise; the
// counts a job view needs are kept as trials come and go. The job runner holds one per active job, so
// neither its turns nor the events it publishes re-read or rescore the job from the store.
//
// Multi-fidelity: only full-fidelity trials (fidelity 1) set the reference durations, can be best() and count
// as the complete reference; a low-fidelity trial is scored against the best durations of its own level
// (its workload is shortened, so its seconds compare with that level's only; user targets are for the full run).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "daemon/store.h"
#include "search/scoring.h"

namespace soartune::daemon {

// Whether a trial counts against the job's trial budget and the search's history: not one cancelled, not one
// failed by a daemon restart.
bool counts_for_budget(const TrialRecord& t);

class ScoredTrials {
 public:
  explicit ScoredTrials(search::ScoringSpec scoring = {});

  // Replaces every trial (one full scoring pass).
  void reset(std::vector<TrialRecord> trials);
  // Adds a trial or replaces the one with its number, and returns it as scored.
  const TrialRecord& put(TrialRecord t);

  const std::map<int64_t, TrialRecord>& all() const { return trials_; }
  const TrialRecord* find(int64_t number) const;
  const TrialRecord* best() const;                 // the highest-scoring COMPLETE full-fidelity trial, or nullptr
  std::vector<TrialRecord> list() const;           // every trial, numbers ascending

  int done() const { return done_; }               // COMPLETE + FAILED
  int failed() const { return failed_; }
  int pruned() const { return pruned_; }           // PRUNED: stopped early, neither done nor failed
  int running() const { return running_; }
  int counted() const { return counted_; }         // counts_for_budget
  int complete() const { return complete_; }
  bool reference_complete() const { return reference_complete_ > 0; }
  // A FAILED reference trial (not by a restart), or nullptr.
  const TrialRecord* reference_failed() const;
  // The best duration of each tier over the COMPLETE full-fidelity trials (or the spec's target): what the
  // full-fidelity scores are relative to.
  const std::array<double, search::kTiers>& reference_durations() const { return reference_s_; }
  // Mean wall time of the finished (COMPLETE, FAILED or PRUNED) trials; 0 when none.
  double mean_trial_seconds() const { return finished_n_ ? finished_s_ / finished_n_ : 0; }
  // How many times every COMPLETE trial was rescored (reset included): the cost put() avoids.
  int64_t full_rescores() const { return full_rescores_; }

 private:
  void count(const TrialRecord& t, int sign);
  void score_one(TrialRecord& t) const;
  void rescore_all();
  void find_best();
  bool lower_reference(const TrialRecord& t);

  search::ScoringSpec scoring_;
  search::ScoringSpec level_scoring_;   // scoring_ without user targets, for low-fidelity levels
  std::map<int64_t, TrialRecord> trials_;
  std::array<double, search::kTiers> reference_s_{};
  std::map<double, std::array<double, search::kTiers>> level_reference_s_;   // per fidelity level below 1
  int64_t best_ = -1;
  int done_ = 0, failed_ = 0, pruned_ = 0, running_ = 0, counted_ = 0, complete_ = 0, reference_complete_ = 0;
  double finished_s_ = 0;
  int finished_n_ = 0;
  int64_t full_rescores_ = 0;
};

}  // namespace soartune::daemon
