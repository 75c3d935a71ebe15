// What a client may send, end to end through the real soartuned: oversized specs, names and notes and
// implausible timestamps are refused with INVALID_ARGUMENT naming the field, and nothing of them is stored, so
// the listings everyone reads keep working.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "daemon/request_limits.h"
#include "daemon/store.h"
#include "daemon_process.h"
#include "soartune/v1/tuner.grpc.pb.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

namespace pb = ::soartune::v1;
using testing::Daemon;
using testing::TempDir;
using testing::write_file;

const char* kJobTail =
    "model: synthetic:tiny\nbackend: cpu\nseed: 1\nbudget: {trials: 1}\ntrial_timeout_s: 120\n"
    "workload: {name: lim, requests: [{name: a, input_len: 8, output_len: 4, count: 1}]}\n"
    "accuracy: {set: synthetic, samples: 2, prompt_len: 8, continuation_len: 4}\n"
    "space:\n  weight_bits: {type: choice, values: [16, 8]}\n";

TEST(RequestLimits, AThreeMegabyteJobNameIsRefusedAndListingsKeepWorking) {
  TempDir dir;
  Daemon d(dir, {});
  ASSERT_TRUE(d.start()) << d.log();
  write_file(dir.file("big.yaml"), "name: " + std::string(3u << 20, 'n') + "\n" + kJobTail);
  ProcessResult big = d.cli({"submit", dir.file("big.yaml")});
  EXPECT_EQ(big.exit_code, 2) << big.err_tail;
  EXPECT_NE(big.err_tail.find("INVALID_ARGUMENT: spec_yaml"), std::string::npos) << big.err_tail.substr(0, 400);
  // Under the spec limit but over the name limit: the name is what is named.
  write_file(dir.file("long.yaml"), "name: " + std::string(100000, 'n') + "\n" + kJobTail);
  ProcessResult long_name = d.cli({"submit", dir.file("long.yaml")});
  EXPECT_EQ(long_name.exit_code, 2);
  EXPECT_NE(long_name.err_tail.find("INVALID_ARGUMENT: name"), std::string::npos) << long_name.err_tail.substr(0, 400);

  write_file(dir.file("ok.yaml"), std::string("name: fine\n") + kJobTail);
  ProcessResult ok = d.cli({"submit", dir.file("ok.yaml")});
  ASSERT_EQ(ok.exit_code, 0) << ok.err_tail;
  ProcessResult jobs = d.cli({"jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.err_tail;
  EXPECT_NE(jobs.out.find("fine"), std::string::npos);
  EXPECT_LT(jobs.out.size(), 10000u);
  d.cli({"cancel", ok.out.substr(0, ok.out.find_first_of(" \n"))});
}

TEST(RequestLimits, SubmissionNotesAndTimestampsAreBounded) {
  TempDir dir;
  Daemon d(dir, {});
  ASSERT_TRUE(d.start()) << d.log();
  auto stub = pb::Tuner::NewStub(grpc::CreateChannel(d.addr(), grpc::InsecureChannelCredentials()));
  auto record = [&](int64_t when, const std::string& note) {
    pb::RecordSubmissionRequest req;
    req.set_job_id("job-does-not-matter");
    req.set_trial(0);
    pb::OfficialResult* r = req.mutable_result();
    r->set_s1(50);
    r->set_s8(50);
    r->set_sinf(50);
    r->set_relative_accuracy(99);
    req.set_submitted_unix_ms(when);
    req.set_note(note);
    grpc::ClientContext ctx;
    pb::Submission out;
    return stub->RecordSubmission(&ctx, req, &out);
  };
  const int64_t year_9999 = 253370764800000;
  grpc::Status s = record(year_9999, "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("submitted_unix_ms:", 0), 0u) << s.error_message();
  s = record(1000, "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "1970 accepted";
  s = record(0, std::string(3u << 20, 'x'));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("note:", 0), 0u) << s.error_message().substr(0, 200);
  // Plausible values get past the limits to the lookup of the (absent) job.
  s = record(0, "a note");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}


// However many large jobs are stored, a page stays under gRPC's message limit and the CLI walks every page.
TEST(RequestLimits, ListPagesStayUnderTheMessageLimit) {
  TempDir dir;
  Daemon d(dir, {});
  ASSERT_TRUE(d.start()) << d.log();
  auto stub = pb::Tuner::NewStub(grpc::CreateChannel(d.addr(), grpc::InsecureChannelCredentials()));
  const std::string padding = "# " + std::string(kMaxSpecBytes - 1000, 'p') + "\n";
  const int n = 20;   // 20 x ~255 KiB of specs: 5 MB, beyond the 4 MiB a response may carry
  for (int i = 0; i < n; ++i) {
    pb::SubmitJobRequest req;
    req.set_spec_yaml("name: big" + std::to_string(i) + "\n" + padding + kJobTail);
    grpc::ClientContext ctx;
    pb::Job job;
    ASSERT_TRUE(stub->SubmitJob(&ctx, req, &job).ok());
  }
  pb::ListJobsRequest req;
  req.set_page_size(1000);
  grpc::ClientContext ctx;
  pb::ListJobsResponse resp;
  grpc::Status s = stub->ListJobs(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_LT(resp.jobs_size(), n);
  EXPECT_FALSE(resp.next_page_token().empty());
  EXPECT_LE(resp.ByteSizeLong(), kMaxResponseBytes + kMaxSpecBytes + 4096);
  ProcessResult jobs = d.cli({"jobs"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err_tail;
  for (int i = 0; i < n; ++i) EXPECT_NE(jobs.out.find("big" + std::to_string(i) + " "), std::string::npos) << i;
}

}  // namespace
}  // namespace soartune::daemon

// ListSubmissions pages like ListJobs: page_size rows at most, a page stops growing at the byte limit, and the CLI
// and a client walking next_page_token see every submission once, in order.
namespace soartune::daemon {
namespace {

TEST(RequestLimits, SubmissionsArePaged) {
  TempDir dir;
  const int n = 700;   // 700 notes of 4 KiB: 2.8 MB, more than one response may carry
  {
    auto store = Store::open(dir.file("soartune.db"));
    ASSERT_TRUE(store.ok()) << store.status().message;
    JobRecord job;
    job.id = "job-x";
    job.name = "x";
    job.state = JobState::kCancelled;
    ASSERT_TRUE(store.value()->insert_job(job).ok());
    TrialRecord trial;
    trial.job_id = job.id;
    trial.number = 0;
    ASSERT_TRUE(store.value()->insert_trial(trial).ok());
    for (int i = 0; i < n; ++i) {
      SubmissionRecord s;
      s.job_id = "job-x";
      s.trial = 0;
      s.budget_day = "2026-12-01";
      s.submitted_ms = 1796000000000 + i;
      s.result = {90, 90, 90, 99, 1, 90};
      s.note = "n" + std::to_string(i) + " " + std::string(kMaxNoteBytes - 10, 'x');
      ASSERT_TRUE(store.value()->insert_submission(s).ok());
    }
  }
  Daemon d(dir, {});
  ASSERT_TRUE(d.start()) << d.log();
  auto stub = pb::Tuner::NewStub(grpc::CreateChannel(d.addr(), grpc::InsecureChannelCredentials()));
  auto page = [&](int size, const std::string& token, pb::ListSubmissionsResponse* out) {
    grpc::ClientContext ctx;
    pb::ListSubmissionsRequest req;
    req.set_page_size(size);
    req.set_page_token(token);
    return stub->ListSubmissions(&ctx, req, out);
  };
  pb::ListSubmissionsResponse first;
  ASSERT_TRUE(page(0, "", &first).ok());
  EXPECT_EQ(first.submissions_size(), 50);   // the default page
  EXPECT_EQ(first.next_page_token(), "50");
  EXPECT_FALSE(first.budget_day().empty());
  std::vector<std::string> notes;
  std::string token;
  int pages = 0;
  do {
    pb::ListSubmissionsResponse r;
    grpc::Status s = page(1000, token, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LE(r.ByteSizeLong(), kMaxResponseBytes + 2 * kMaxNoteBytes);
    for (const auto& sub : r.submissions()) notes.push_back(sub.note().substr(0, sub.note().find(' ')));
    token = r.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 100);
  EXPECT_GE(pages, 2);
  ASSERT_EQ(notes.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(notes[i], "n" + std::to_string(i));
  pb::ListSubmissionsResponse bad;
  grpc::Status s = page(-1, "", &bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = page(10, "not-a-token", &bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("page_token:", 0), 0u) << s.error_message();

  ProcessResult cli = d.cli({"submissions", "--json"});
  ASSERT_EQ(cli.exit_code, 0) << cli.err_tail;
  EXPECT_NE(cli.out.find("\"n0 "), std::string::npos);
  EXPECT_NE(cli.out.find("\"n699 "), std::string::npos);
}

}  // namespace
}  // namespace soartune::daemon
