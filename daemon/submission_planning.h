// Which COMPLETE trials to spend today's remaining official submissions on: the job's search state, its
// recorded official results (the local-to-official calibration) and the daily budget, handed to
// search::plan. The gRPC layer only validates the request and converts the answer.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/status.h"
#include "daemon/job_manager.h"
#include "search/budget_day.h"
#include "search/planner.h"

namespace soartune::daemon {

// The job's submission budget: its spec's `submissions:` when set, else the daemon's.
search::SubmissionBudget submission_budget(JobManager& jobs, const std::string& job_id);

struct SubmissionPlan {
  search::BudgetDay today;
  search::Plan plan;
  std::map<int64_t, std::map<std::string, std::string>> params;   // each pick's launch params, by trial
  std::map<int64_t, bool> accuracy_proxy;                          // each pick's TrialRecord::accuracy_proxy
};

// k: picks wanted (0: all that remain today); accuracy_sigma: 0 for the default or learned value. Errors:
// kResourceExhausted when nothing remains today, kInvalidArgument for a k above what remains,
// kFailedPrecondition for a job without a COMPLETE trial.
Result<SubmissionPlan> plan_submissions(JobManager& jobs, const std::string& job_id, int k, double accuracy_sigma,
                                        int64_t now_ms);

}  // namespace soartune::daemon
