// What the worker's accuracy pass reads from disk, as untrusted input: the accuracy set (.jsonl, the user's) and
// a reference file (reference.read, written by another worker). Token ids must be integers inside the
// vocabulary; a reference whose rows do not match the set, or whose continuations hold tokens outside the
// vocabulary, is refused by name, never indexed past its end or fed to the model.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model_loader.h"
#include "engine/worker/accuracy.h"
#include "engine_runs.h"

namespace soartune::engine::worker {
namespace {

class ReferenceOutputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = load_model("synthetic:tiny", 7);
    ASSERT_TRUE(w.ok()) << w.status().message;
    weights_ = std::move(w).value();
    AccuracySpec spec;
    spec.samples = 3;
    spec.prompt_len = 8;
    spec.continuation_len = 4;
    auto set = load_accuracy_set(spec, 1, weights_.config.vocab);
    ASSERT_TRUE(set.ok()) << set.status().message;
    set_ = set.value();
    ASSERT_EQ(set_.metric, "fidelity");
    auto e = testing::cpu_engine(weights_, LaunchConfig::reference());
    ASSERT_NE(e, nullptr);
    auto r = compute_reference(*e, set_);
    ASSERT_TRUE(r.ok()) << r.status().message;
    reference_ = r.value();
  }
  Result<AccuracyResult> evaluate(const ReferenceOutputs& ref) {
    auto e = testing::cpu_engine(weights_, LaunchConfig::reference());
    if (!e) return Status::Internal("no engine");
    return evaluate_accuracy(*e, set_, ref);
  }

  ModelWeights weights_;
  AccuracySet set_;
  ReferenceOutputs reference_;
};

TEST_F(ReferenceOutputsTest, TheSameConfigAgreesFully) {
  auto a = evaluate(reference_);
  ASSERT_TRUE(a.ok()) << a.status().message;
  EXPECT_DOUBLE_EQ(a.value().relative_pct, 100.0);
}

TEST_F(ReferenceOutputsTest, RowsThatDoNotMatchTheSetAreRefused) {
  ReferenceOutputs short_top1 = reference_;
  short_top1.top1.pop_back();
  auto a = evaluate(short_top1);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message.rfind("reference.read: ", 0), 0u) << a.status().message;
  ReferenceOutputs short_conts = reference_;
  short_conts.continuations.pop_back();
  a = evaluate(short_conts);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message.rfind("reference.read: ", 0), 0u) << a.status().message;
}

TEST_F(ReferenceOutputsTest, AContinuationTokenOutsideTheVocabularyIsRefused) {
  ReferenceOutputs bad = reference_;
  bad.continuations[1][0] = weights_.config.vocab + 5;
  auto a = evaluate(bad);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message.find("outside the vocabulary"), std::string::npos) << a.status().message;
}

// An accuracy set (.jsonl) is user input: token ids must be integers inside the vocabulary, checked before they
// narrow to 32 bits.
TEST(AccuracySetFile, TokenIdsAreIntegersInsideTheVocabulary) {
  const std::string path = ::testing::TempDir() + "soartune-accuracy-set-" + std::to_string(::getpid()) + ".jsonl";
  auto load = [&](const std::string& line) {
    std::ofstream(path) << line << "\n";
    AccuracySpec spec;
    spec.set = path;
    spec.samples = 4;
    return load_accuracy_set(spec, 1, 100);
  };
  auto ok = load(R"({"prompt_ids": [1, 2, 3], "continuation_ids": [4, 99]})");
  ASSERT_TRUE(ok.ok()) << ok.status().message;
  EXPECT_EQ(ok.value().items.at(0).continuation, (std::vector<int32_t>{4, 99}));
  for (const char* bad : {R"({"prompt_ids": [1, 4294967301]})",          // 2^32 + 5: not token 5
                          R"({"prompt_ids": [1, 18446744073709551615]})",  // beyond int64
                          R"({"prompt_ids": [1.5, 2]})", R"({"prompt_ids": [1, "2"]})", R"({"prompt_ids": 3})",
                          R"({"prompt_ids": [1], "continuation_ids": [-1]})", R"({"prompt_ids": [100]})"}) {
    auto r = load(bad);
    ASSERT_FALSE(r.ok()) << bad << " was accepted";
    EXPECT_EQ(r.status().message.rfind("accuracy.set: " + path + " line 1: ", 0), 0u) << r.status().message;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace soartune::engine::worker
