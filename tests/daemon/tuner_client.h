// The gRPC calls the end-to-end daemon tests make over and over (submit, get, wait until finished, list trials,
// the best), against a soartuned started with daemon_process.h.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "soartune/v1/tuner.grpc.pb.h"

namespace soartune::daemon::testing {

class TunerClient {
 public:
  explicit TunerClient(const std::string& addr)
      : stub_(::soartune::v1::Tuner::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()))) {}

  ::soartune::v1::Tuner::Stub& stub() { return *stub_; }

  // The new job's id; "" (and a test failure) when it was refused.
  std::string submit(const std::string& spec) {
    grpc::ClientContext ctx;
    ::soartune::v1::SubmitJobRequest req;
    req.set_spec_yaml(spec);
    ::soartune::v1::Job job;
    const grpc::Status s = stub_->SubmitJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job.id();
  }
  ::soartune::v1::Job get(const std::string& id) {
    grpc::ClientContext ctx;
    ::soartune::v1::GetJobRequest req;
    req.set_job_id(id);
    ::soartune::v1::Job job;
    stub_->GetJob(&ctx, req, &job);
    return job;
  }
  // The job once it is SUCCEEDED, FAILED or CANCELLED, or as it is after `seconds`.
  ::soartune::v1::Job wait_finished(const std::string& id, int seconds) {
    ::soartune::v1::Job j;
    for (int i = 0; i < seconds * 10; ++i) {
      j = get(id);
      if (j.state() == ::soartune::v1::JOB_SUCCEEDED || j.state() == ::soartune::v1::JOB_FAILED ||
          j.state() == ::soartune::v1::JOB_CANCELLED)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return j;
  }
  std::vector<::soartune::v1::Trial> trials(const std::string& id) {
    grpc::ClientContext ctx;
    ::soartune::v1::ListTrialsRequest req;
    req.set_job_id(id);
    req.set_page_size(1000);
    ::soartune::v1::ListTrialsResponse resp;
    EXPECT_TRUE(stub_->ListTrials(&ctx, req, &resp).ok());
    return {resp.trials().begin(), resp.trials().end()};
  }
  ::soartune::v1::Trial best(const std::string& id) {
    grpc::ClientContext ctx;
    ::soartune::v1::GetBestRequest req;
    req.set_job_id(id);
    ::soartune::v1::Trial t;
    EXPECT_TRUE(stub_->GetBest(&ctx, req, &t).ok());
    return t;
  }

 private:
  std::unique_ptr<::soartune::v1::Tuner::Stub> stub_;
};

}  // namespace soartune::daemon::testing
