#include "daemon/scored_trials.h"

#include <cmath>
#include <limits>

#include "daemon/trial_result.h"

namespace soartune::daemon {

bool counts_for_budget(const TrialRecord& t) {
  if (t.status == TrialStatus::kCancelled) return false;
  if (t.failure_kind == FailureKind::kRestart) return false;
  return true;
}

namespace {
bool full(const TrialRecord& t) { return t.fidelity >= 1.0 - 1e-9; }
}  // namespace

ScoredTrials::ScoredTrials(search::ScoringSpec scoring) : scoring_(std::move(scoring)), level_scoring_(scoring_) {
  reference_s_ = search::reference_durations(scoring_, {});
  level_scoring_.target_s = {};
}

void ScoredTrials::reset(std::vector<TrialRecord> trials) {
  *this = ScoredTrials(scoring_);
  for (TrialRecord& t : trials) {
    count(t, +1);
    if (t.status == TrialStatus::kComplete) lower_reference(t);
    const int64_t n = t.number;
    trials_[n] = std::move(t);
  }
  rescore_all();
}

const TrialRecord& ScoredTrials::put(TrialRecord t) {
  auto it = trials_.find(t.number);
  if (it != trials_.end()) count(it->second, -1);
  count(t, +1);
  const int64_t n = t.number;
  const bool moved = t.status == TrialStatus::kComplete && lower_reference(t);
  TrialRecord& slot = trials_[n] = std::move(t);
  if (moved) {
    rescore_all();
  } else {
    score_one(slot);
    if (slot.status == TrialStatus::kComplete && full(slot)) {
      const TrialRecord* b = best();
      if (!b || slot.score > b->score || (slot.score == b->score && slot.number < b->number)) best_ = slot.number;
    } else if (best_ == n) {
      find_best();   // the best trial was replaced by one without a score
    }
  }
  return trials_.at(n);
}

const TrialRecord* ScoredTrials::find(int64_t number) const {
  auto it = trials_.find(number);
  return it == trials_.end() ? nullptr : &it->second;
}

const TrialRecord* ScoredTrials::best() const { return find(best_); }

std::vector<TrialRecord> ScoredTrials::list() const {
  std::vector<TrialRecord> out;
  out.reserve(trials_.size());
  for (const auto& [n, t] : trials_) out.push_back(t);
  return out;
}

const TrialRecord* ScoredTrials::reference_failed() const {
  for (const auto& [n, t] : trials_)
    if (t.is_reference && t.status == TrialStatus::kFailed && t.failure_kind != FailureKind::kRestart) return &t;
  return nullptr;
}

void ScoredTrials::count(const TrialRecord& t, int sign) {
  const bool finished = t.status == TrialStatus::kComplete || t.status == TrialStatus::kFailed;
  if (finished) done_ += sign;
  if (t.status == TrialStatus::kPruned) pruned_ += sign;
  if (t.status == TrialStatus::kFailed) failed_ += sign;
  if (t.status == TrialStatus::kRunning) running_ += sign;
  if (t.status == TrialStatus::kComplete) complete_ += sign;
  if (counts_for_budget(t)) counted_ += sign;
  if (t.is_reference && t.status == TrialStatus::kComplete && full(t)) reference_complete_ += sign;
  if ((finished || t.status == TrialStatus::kPruned) && t.finished_ms > t.started_ms) {
    finished_s_ += sign * (t.finished_ms - t.started_ms) / 1000.0;
    finished_n_ += sign;
  }
}

void ScoredTrials::score_one(TrialRecord& t) const {
  if (t.status != TrialStatus::kComplete) {
    t.score = t.gate = 0;
    return;
  }
  if (!full(t)) {
    auto it = level_reference_s_.find(t.fidelity);
    const search::Score s = it == level_reference_s_.end()
                                ? search::Score{}
                                : search::score(level_scoring_, metrics_of(t), it->second);
    t.score = s.final_score;
    t.gate = s.gate;
    return;
  }
  const search::Score s = search::score(scoring_, metrics_of(t), reference_s_);
  t.score = s.final_score;
  t.gate = s.gate;
}

void ScoredTrials::rescore_all() {
  ++full_rescores_;
  for (auto& [n, t] : trials_) score_one(t);
  find_best();
}

void ScoredTrials::find_best() {
  best_ = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  for (const auto& [n, t] : trials_) {
    if (t.status == TrialStatus::kComplete && full(t) && t.score > best_score) {
      best_score = t.score;
      best_ = n;
    }
  }
}

bool ScoredTrials::lower_reference(const TrialRecord& t) {
  const search::TrialMetrics m = metrics_of(t);
  const bool at_full = full(t);
  std::array<double, search::kTiers>* ref = &reference_s_;
  if (!at_full) {
    auto [it, fresh] = level_reference_s_.try_emplace(t.fidelity, search::reference_durations(level_scoring_, {}));
    ref = &it->second;
  }
  bool moved = false;
  for (int k = 0; k < search::kTiers; ++k) {
    if (at_full && scoring_.target_s[k]) continue;
    const double d = m.duration_s[k];
    if (std::isfinite(d) && d > 0 && !(d >= (*ref)[k])) {
      (*ref)[k] = d;
      moved = true;
    }
  }
  return moved;
}

}  // namespace soartune::daemon
