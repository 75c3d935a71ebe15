// A reference file (reference.read) is read back from disk by another worker: a file whose rows do not match the
// accuracy set, or whose continuations hold tokens outside the vocabulary, is refused by name, never indexed past
// its end or fed to the model.
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

}  // namespace
}  // namespace soartune::engine::worker
