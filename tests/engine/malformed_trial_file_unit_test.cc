// A trial file is read by the worker with checks, not exceptions: whatever it holds, load_trial returns a
// status naming the field. The first case is an input the fuzzer found (tests/fuzz/trial_file_fuzz.cc,
// docs/FUZZING.md).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "engine/worker/trial.h"

namespace soartune::engine::worker {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::string& yaml) {
  const fs::path p = fs::temp_directory_path() / ("soartune-trial-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << yaml;
  auto t = load_trial(p.string());
  fs::remove(p);
  return t.ok() ? "ok" : t.status().message;
}

const std::string kHead = "model: synthetic:tiny\nlaunch: {}\n";
const std::string kWorkload = "workload: {requests: [{input_len: 4, output_len: 4}]}\n";

TEST(MalformedTrialFile, TheMinimalFileReads) { EXPECT_EQ(error_of(kHead + kWorkload), "ok"); }

// Found by the fuzzer: a workload given as a file name longer than the file system allows made
// std::filesystem::exists throw (filesystem_error: File name too long), which aborted the worker.
TEST(MalformedTrialFile, APathTooLongForTheFileSystemIsNotFound) {
  const std::string long_name(5000, 'w');
  EXPECT_NE(error_of(kHead + "workload: " + long_name + "\n").find("workload: file " + long_name + " not found"),
            std::string::npos);
  EXPECT_NE(error_of(kHead + kWorkload + "accuracy: {set: " + long_name + "}\n").find("accuracy.set: "), std::string::npos);
  EXPECT_NE(error_of(kHead + kWorkload + "calibration: {set: " + long_name + "}\n").find("calibration.set: "), std::string::npos);
  EXPECT_NE(error_of(kHead + kWorkload + "reference: {read: " + long_name + "}\n").find("reference.read: "), std::string::npos);
  EXPECT_NE(error_of(kHead + kWorkload + "accuracy: {model: hf:" + long_name + "}\n").find("accuracy.model: "), std::string::npos);
}

TEST(MalformedTrialFile, KeysAndValuesOfTheWrongShapeAreNamed) {
  EXPECT_NE(error_of("? [a, b]\n: 1\n" + kHead + kWorkload).find("a top-level key is not a string"), std::string::npos);
  EXPECT_NE(error_of(kHead + kWorkload + "reference: {write: [a]}\n").find("reference.write: must be a path"), std::string::npos);
  EXPECT_NE(error_of(kHead + kWorkload + "reference: {read: {a: 1}}\n").find("reference.read: must be a path"), std::string::npos);
}

// input_len + output_len and the total request count are ints in the engine: bounded as the daemon bounds them.
TEST(MalformedTrialFile, WorkloadSizesAreBounded) {
  EXPECT_NE(error_of(kHead + "workload: {requests: [{input_len: 2147483647, output_len: 2147483647}]}\n")
                .find("workload.requests[0].input_len: 2147483647 is not an integer in 1..1048576"),
            std::string::npos);
  std::string many = kHead + "workload: {requests: [";
  for (int i = 0; i < 17; ++i) many += std::string(i ? ", " : "") + "{input_len: 1, output_len: 1, count: 1048576}";
  EXPECT_NE(error_of(many + "]}\n").find("workload.requests: more than 16777216 requests in all"), std::string::npos);
}

}  // namespace
}  // namespace soartune::engine::worker
