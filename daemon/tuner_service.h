// The gRPC front end: request validation, proto conversion and paging. Everything else goes through the
// JobManager; every error comes from a soartune::Status mapped once by to_grpc().
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/job_manager.h"
#include "soartune/v1/tuner.grpc.pb.h"

namespace soartune::daemon {

namespace pb = ::soartune::v1;

class TunerService final : public pb::Tuner::Service {
 public:
  // `daemon_warnings`: what the daemon warns about itself (e.g. serving off loopback unprotected), sent with
  // every job so that `soartune status` shows it.
  explicit TunerService(JobManager& jobs, std::vector<std::string> daemon_warnings = {})
      : jobs_(jobs), daemon_warnings_(std::move(daemon_warnings)) {}

  grpc::Status SubmitJob(grpc::ServerContext*, const pb::SubmitJobRequest*, pb::Job*) override;
  grpc::Status GetJob(grpc::ServerContext*, const pb::GetJobRequest*, pb::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const pb::ListJobsRequest*, pb::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const pb::CancelJobRequest*, pb::Job*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const pb::WatchJobRequest*, grpc::ServerWriter<pb::JobEvent>*) override;
  grpc::Status ListTrials(grpc::ServerContext*, const pb::ListTrialsRequest*, pb::ListTrialsResponse*) override;
  grpc::Status GetTrial(grpc::ServerContext*, const pb::GetTrialRequest*, pb::Trial*) override;
  grpc::Status GetBest(grpc::ServerContext*, const pb::GetBestRequest*, pb::Trial*) override;
  grpc::Status ExportConfig(grpc::ServerContext*, const pb::ExportConfigRequest*, pb::ExportConfigResponse*) override;
  grpc::Status PlanSubmissions(grpc::ServerContext*, const pb::PlanSubmissionsRequest*,
                               pb::PlanSubmissionsResponse*) override;
  grpc::Status RecordSubmission(grpc::ServerContext*, const pb::RecordSubmissionRequest*, pb::Submission*) override;
  grpc::Status ListSubmissions(grpc::ServerContext*, const pb::ListSubmissionsRequest*,
                               pb::ListSubmissionsResponse*) override;

  // The WatchJob stream for any transport (gRPC, the dashboard's server-sent events): `write` returns false
  // once the reader is gone; `cancelled` says the caller gave up.
  grpc::Status watch(const std::string& job_id, const std::function<bool()>& cancelled,
                     const std::function<bool(const pb::JobEvent&)>& write);

 private:
  JobManager& jobs_;
  std::vector<std::string> daemon_warnings_;
  std::mutex submissions_mu_;   // count-then-insert of a submission is atomic
};

void to_proto(const JobView& v, pb::Job* out);
void to_proto(const TrialRecord& t, pb::Trial* out);

}  // namespace soartune::daemon
