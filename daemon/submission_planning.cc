#include "daemon/submission_planning.h"

#include <algorithm>
#include <vector>

#include "daemon/trial_result.h"
#include "search/calibration.h"
#include "search/prediction.h"

namespace soartune::daemon {

search::SubmissionBudget submission_budget(JobManager& jobs, const std::string& job_id) {
  if (!job_id.empty()) {
    if (auto spec = jobs.spec_of(job_id); spec.ok() && spec.value()->submissions) return *spec.value()->submissions;
  }
  const DaemonConfig& c = jobs.config();
  Result<search::SubmissionBudget> b = search::SubmissionBudget::make(c.submissions_timezone, c.submissions_per_day);
  if (b.ok()) return b.value();
  return search::SubmissionBudget::make().value();
}

Result<SubmissionPlan> plan_submissions(JobManager& jobs, const std::string& job_id, int k, double accuracy_sigma,
                                        int64_t now_ms) {
  Result<JobManager::SearchState> st = jobs.search_state(job_id);
  if (!st.ok()) return st.status();
  search::SubmissionBudget budget = submission_budget(jobs, job_id);
  const std::string day = budget.budget_day(now_ms);
  std::vector<SubmissionRecord> subs = jobs.with_store([&](Store& s) { return s.list_submissions(job_id); });
  const int used = jobs.with_store([&](Store& s) { return s.count_submissions_on_day(day); });
  SubmissionPlan out;
  out.today = budget.day(now_ms, used);
  const search::BudgetDay& today = out.today;
  if (today.remaining == 0)
    return Status::Exhausted("no official submissions left on " + today.day + " (" + std::to_string(today.per_day) +
                             " a day); the budget resets at " + today.resets_at);
  if (k > today.remaining)
    return Status::Invalid("k: " + std::to_string(k) + " is more than the " + std::to_string(today.remaining) +
                           " submission(s) left today");
  if (k == 0) k = today.remaining;

  const JobManager::SearchState& state = st.value();
  std::vector<soartune::Config> configs;
  std::vector<const TrialRecord*> complete;
  std::vector<search::TrialMetrics> observed;
  for (size_t i = 0; i < state.trials.size(); ++i) {
    // Full-fidelity runs only: a screening run's durations are of a shortened workload.
    if (state.trials[i].status != TrialStatus::kComplete || state.trials[i].fidelity < 1.0) continue;
    complete.push_back(&state.trials[i]);
    configs.push_back(state.history[i].config);
    observed.push_back(metrics_of(state.trials[i]));
  }
  if (complete.empty()) return Status::Precondition("job_id: job " + job_id + " has no COMPLETE trial to plan with");
  std::vector<search::Prediction> preds = search::predict(state.problem, state.history, configs);
  std::vector<search::PlanCandidate> candidates;
  for (size_t i = 0; i < preds.size() && i < complete.size(); ++i) candidates.push_back({complete[i]->number, preds[i]});
  auto find = [&](int64_t number) -> const TrialRecord* {
    for (const TrialRecord* c : complete)
      if (c->number == number) return c;
    return nullptr;
  };

  // Calibration from this job's recorded official results.
  std::vector<search::CalibrationSample> samples;
  double best_today = 0;
  for (const SubmissionRecord& s : subs) {
    if (s.budget_day == today.day) best_today = std::max(best_today, s.result.final_score);
    const TrialRecord* t = find(s.trial);
    if (!t) continue;
    search::CalibrationSample cs;
    search::TrialMetrics m = metrics_of(*t);
    cs.local_duration_s = m.duration_s;
    cs.local_accuracy_pct = m.relative_accuracy_pct;
    cs.official_tier_score = {s.result.s1, s.result.s8, s.result.sinf};
    cs.official_accuracy_pct = s.result.relative_accuracy;
    cs.official_failed = s.result.s1 <= 0 && s.result.s8 <= 0 && s.result.sinf <= 0 && s.result.final_score <= 0;
    samples.push_back(cs);
  }
  Result<search::Calibration> cal = search::fit_calibration(samples);
  if (!cal.ok()) return cal.status();
  auto reference_s = search::reference_durations(state.problem.scoring, observed);
  search::PlanOptions options;
  options.seed = state.problem.seed;
  options.best_today = best_today;
  Result<search::Plan> plan =
      search::plan(k, candidates, state.problem.scoring, reference_s, accuracy_sigma, cal.value(), options);
  if (!plan.ok()) return plan.status();
  out.plan = std::move(plan).value();
  for (const search::PlanPick& p : out.plan.picks)
    if (const TrialRecord* t = find(p.trial)) {
      out.params[p.trial] = t->params;
      out.accuracy_proxy[p.trial] = t->accuracy_proxy;
    }
  return out;
}

}  // namespace soartune::daemon
