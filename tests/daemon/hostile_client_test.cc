// What a hostile worker or client sends never takes soartuned down or leaves a listing unreadable, end to end:
// a worker whose result has the wrong types and whose output has bytes that are not UTF-8 gives a FAILED trial
// that every CLI listing shows (the daemon stays up, and again after a restart on the same database); every RPC
// refused, whatever the malformed request, says why in a non-empty message.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "daemon_process.h"
#include "soartune/v1/tuner.grpc.pb.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

namespace pb = ::soartune::v1;
using testing::Daemon;
using testing::TempDir;
using testing::write_file;
using testing::write_script;

const char* kJob =
    "name: hostile\nmodel: synthetic:tiny\nbackend: cpu\nseed: 1\nbudget: {trials: 2}\ntrial_timeout_s: 60\n"
    "workload: {name: h, requests: [{name: a, input_len: 8, output_len: 4, count: 1}]}\n"
    "accuracy: {set: synthetic, samples: 2, prompt_len: 8, continuation_len: 4}\n"
    "space:\n  weight_bits: {type: choice, values: [16, 8]}\n";

const std::string kReplacement = "\xEF\xBF\xBD";

std::string wait_terminal(Daemon& d, const std::string& job) {
  for (int i = 0; i < 600; ++i) {
    ProcessResult st = d.cli({"status", job, "--json"});
    for (const char* s : {"SUCCEEDED", "FAILED", "CANCELLED"})
      if (st.out.find("\"state\": \"" + std::string(s) + "\"") != std::string::npos) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "";
}

TEST(HostileWorker, WrongTypesAndBadBytesGiveAFailedTrialThatEveryListingShows) {
  TempDir dir;
  Daemon d(dir, {});
  // {"ok": 1} used to abort the daemon (an uncaught type error), again on every restart; the bytes \377 \376 and a
  // cut-off \303 used to make every listing carrying them fail.
  d.worker = write_script(dir.file("worker.sh"), "printf 'loading \\377\\376 weights\\n' >&2\n"
                                                 "printf 'caf\\303\\n' >&2\n"
                                                 "echo '{\"ok\": 1}'");
  ASSERT_TRUE(d.start()) << d.log();
  write_file(dir.file("job.yaml"), kJob);
  ProcessResult sub = d.cli({"submit", dir.file("job.yaml")});
  ASSERT_EQ(sub.exit_code, 0) << sub.err_tail;
  const std::string job = sub.out.substr(0, sub.out.find_first_of(" \n"));
  EXPECT_EQ(wait_terminal(d, job), "FAILED") << d.log();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "running since the job" : "after kill -9 and a restart");
    EXPECT_EQ(::kill(d.pid(), 0), 0) << "soartuned is gone";
    ProcessResult jobs = d.cli({"jobs"});
    EXPECT_EQ(jobs.exit_code, 0) << jobs.err_tail;
    EXPECT_NE(jobs.out.find(job), std::string::npos) << jobs.out;
    ProcessResult status = d.cli({"status", job});
    EXPECT_EQ(status.exit_code, 0) << status.err_tail;
    EXPECT_NE(status.out.find("ok: expected a boolean, got number"), std::string::npos) << status.out;
    ProcessResult trials = d.cli({"trials", job});
    EXPECT_EQ(trials.exit_code, 0) << trials.err_tail;
    ProcessResult show = d.cli({"show", job, "0"});
    EXPECT_EQ(show.exit_code, 0) << show.err_tail;
    EXPECT_NE(show.out.find("loading " + kReplacement + kReplacement + " weights"), std::string::npos) << show.out;
    EXPECT_NE(show.out.find("caf" + kReplacement), std::string::npos) << show.out;
    // watch of a failed job prints its end and exits 1 (the job failed), not "lost the connection".
    ProcessResult watch = d.cli({"watch", job});
    EXPECT_NE(watch.out.find("FAILED (reference failed)"), std::string::npos) << watch.out << watch.err_tail;
    EXPECT_EQ(watch.err_tail.find("connection"), std::string::npos) << watch.err_tail;
    d.kill_hard();
    ASSERT_TRUE(d.start()) << d.log();
  }
}

// Each RPC, sent what a careless or hostile client might: every refusal carries a message that says why.
TEST(HostileClient, EveryRpcErrorHasAMessage) {
  TempDir dir;
  Daemon d(dir, {});
  ASSERT_TRUE(d.start()) << d.log();
  auto stub = pb::Tuner::NewStub(grpc::CreateChannel(d.addr(), grpc::InsecureChannelCredentials()));
  // A job with no complete trial yet (queued behind nothing, its reference still to run).
  std::string queued;
  {
    grpc::ClientContext c;
    pb::SubmitJobRequest req;
    req.set_spec_yaml(kJob);
    pb::Job out;
    ASSERT_TRUE(stub->SubmitJob(&c, req, &out).ok());
    queued = out.id();
  }
  int errors = 0;
  auto expect_message = [&](const std::string& what, const std::function<grpc::Status(grpc::ClientContext*)>& call) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::Status s = call(&c);
    if (s.ok()) return;
    ++errors;
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNKNOWN) << what << ": " << s.error_message();
    EXPECT_FALSE(s.error_message().empty()) << what << " answered " << s.error_code() << " without a message";
  };
  for (const std::string& id : {std::string(), std::string("nope"), std::string(300, 'x'), std::string("\xFF"), queued}) {
    const std::string tag = "job_id '" + id.substr(0, 10) + "'";
    expect_message("GetJob " + tag, [&](auto* c) {
      pb::GetJobRequest r; r.set_job_id(id); pb::Job o; return stub->GetJob(c, r, &o); });
    expect_message("CancelJob " + tag, [&](auto* c) {
      pb::CancelJobRequest r; r.set_job_id(id == queued ? "" : id); pb::Job o; return stub->CancelJob(c, r, &o); });
    expect_message("ListTrials " + tag, [&](auto* c) {
      pb::ListTrialsRequest r; r.set_job_id(id); r.set_order_by("bogus"); pb::ListTrialsResponse o;
      return stub->ListTrials(c, r, &o); });
    expect_message("ListTrials status " + tag, [&](auto* c) {
      pb::ListTrialsRequest r; r.set_job_id(id); r.set_status(static_cast<pb::TrialStatus>(99)); pb::ListTrialsResponse o;
      return stub->ListTrials(c, r, &o); });
    for (int64_t n : {int64_t{-1}, int64_t{0}, int64_t{1} << 40}) {
      expect_message("GetTrial " + tag, [&](auto* c) {
        pb::GetTrialRequest r; r.set_job_id(id); r.set_number(n); pb::Trial o; return stub->GetTrial(c, r, &o); });
      expect_message("ExportConfig " + tag, [&](auto* c) {
        pb::ExportConfigRequest r; r.set_job_id(id); r.set_trial(n); pb::ExportConfigResponse o;
        return stub->ExportConfig(c, r, &o); });
      expect_message("ExportConfig format " + tag, [&](auto* c) {
        pb::ExportConfigRequest r; r.set_job_id(id); r.set_trial(n); r.set_format("pdf"); pb::ExportConfigResponse o;
        return stub->ExportConfig(c, r, &o); });
      expect_message("RecordSubmission " + tag, [&](auto* c) {
        pb::RecordSubmissionRequest r; r.set_job_id(id); r.set_trial(n); r.mutable_result()->set_s1(-5);
        pb::Submission o; return stub->RecordSubmission(c, r, &o); });
    }
    expect_message("GetBest " + tag, [&](auto* c) {
      pb::GetBestRequest r; r.set_job_id(id); pb::Trial o; return stub->GetBest(c, r, &o); });
    for (int k : {-1, 0, 1000000}) {
      expect_message("PlanSubmissions " + tag, [&](auto* c) {
        pb::PlanSubmissionsRequest r; r.set_job_id(id); r.set_k(k); r.set_accuracy_sigma(k < 0 ? -1 : 1e308);
        pb::PlanSubmissionsResponse o; return stub->PlanSubmissions(c, r, &o); });
    }
    expect_message("ListSubmissions " + tag, [&](auto* c) {
      pb::ListSubmissionsRequest r; r.set_job_id(id); r.set_page_token("x"); pb::ListSubmissionsResponse o;
      return stub->ListSubmissions(c, r, &o); });
    expect_message("WatchJob " + tag, [&](auto* c) {
      pb::WatchJobRequest r; r.set_job_id(id == queued ? "" : id); auto reader = stub->WatchJob(c, r);
      pb::JobEvent e;
      while (reader->Read(&e)) {
      }
      return reader->Finish(); });
  }
  for (const std::string& spec : {std::string(), std::string("[1, 2"), std::string("model: synthetic:nonexistent"),
                                  std::string("\xFF\xFE")}) {
    expect_message("SubmitJob", [&](auto* c) {
      pb::SubmitJobRequest r; r.set_spec_yaml(spec); pb::Job o; return stub->SubmitJob(c, r, &o); });
  }
  expect_message("ListJobs", [&](auto* c) {
    pb::ListJobsRequest r; r.set_page_size(-1); pb::ListJobsResponse o; return stub->ListJobs(c, r, &o); });
  EXPECT_GT(errors, 50) << "the malformed requests were accepted";
  // A path component longer than the file system allows used to answer UNKNOWN: "unexpected error".
  for (const std::string& model : {"hf:/tmp/" + std::string(300, 'm'), "hf:" + std::string(5000, 'm')}) {
    grpc::ClientContext c;
    pb::SubmitJobRequest r;
    std::string spec = kJob;
    spec.replace(spec.find("synthetic:tiny"), 14, model);
    r.set_spec_yaml(spec);
    pb::Job o;
    grpc::Status s = stub->SubmitJob(&c, r, &o);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message().substr(0, 200);
    EXPECT_EQ(s.error_message().rfind("model:", 0), 0u) << s.error_message().substr(0, 200);
  }
  // A request gRPC cannot even parse (a string that is not UTF-8) is the client's fault, and says so.
  {
    grpc::ClientContext c;
    pb::GetJobRequest r;
    r.set_job_id("\xFF");
    pb::Job o;
    grpc::Status s = stub->GetJob(&c, r, &o);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message().rfind("request: not a valid request message for /soartune.v1.Tuner/GetJob", 0), 0u)
        << s.error_message();
  }
  grpc::ClientContext c;
  pb::CancelJobRequest r;
  r.set_job_id(queued);
  pb::Job o;
  stub->CancelJob(&c, r, &o);
}

// model: synthetic:nonexistent through the daemon and the CLI: INVALID_ARGUMENT naming model and the presets,
// and nothing stored.
TEST(HostileClient, AnUnknownSyntheticPresetIsRefusedAtSubmission) {
  TempDir dir;
  Daemon d(dir, {});
  ASSERT_TRUE(d.start()) << d.log();
  std::string spec = kJob;
  spec.replace(spec.find("synthetic:tiny"), 14, "synthetic:nonexistent");
  write_file(dir.file("job.yaml"), spec);
  ProcessResult r = d.cli({"submit", dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 2) << r.err_tail;
  EXPECT_NE(r.err_tail.find("INVALID_ARGUMENT: model: synthetic preset 'nonexistent' is not one of tiny, small, "
                            "llama3-8b, minicpm-sala-9b, tiny-sala"),
            std::string::npos) << r.err_tail;
  ProcessResult jobs = d.cli({"jobs"});
  EXPECT_EQ(jobs.exit_code, 0);
  EXPECT_EQ(jobs.out.find("hostile"), std::string::npos) << jobs.out;
}

}  // namespace
}  // namespace soartune::daemon
