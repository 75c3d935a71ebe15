#include "search/prediction.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

TEST(Predict, MeasuredConfigsKeepTheirValuesOthersAreModelled) {
  auto s = Space::parse(YAML::Load(R"(
weight_bits: {type: choice, values: [16, 8, 4]}
max_running_requests: {type: pow2, low: 1, high: 64}
)"));
  ASSERT_TRUE(s.ok()) << s.status().message;
  SearchProblem p;
  p.space = s.value();
  p.reference = {{"weight_bits", int64_t{16}}, {"max_running_requests", int64_t{8}}};
  std::vector<Observation> h;
  std::mt19937_64 rng(4);
  std::normal_distribution<double> n(0, 0.01);
  for (int64_t bits : {16, 8, 4}) {
    for (int64_t mrr : {1, 4, 16, 64}) {
      Observation o;
      o.config = {{"weight_bits", bits}, {"max_running_requests", mrr}};
      if (bits == 4 && mrr == 64) {
        o.outcome = Outcome::kFailed;
        h.push_back(o);
        continue;
      }
      o.outcome = Outcome::kComplete;
      const double d = (0.5 + bits / 32.0) * (1 + 4.0 / mrr);
      o.metrics.duration_s = {d * std::exp(n(rng)), 2 * d * std::exp(n(rng)), 3 * d * std::exp(n(rng))};
      o.metrics.relative_accuracy_pct = 100 - (bits == 4 ? 2 : bits == 8 ? 0.3 : 0) + 0.05 * n(rng);
      h.push_back(o);
    }
  }
  const Config seen = h[5].config;   // 8 bits, 4 requests
  const Config unseen = {{"weight_bits", int64_t{8}}, {"max_running_requests", int64_t{8}}};
  const auto pred = predict(p, h, {seen, unseen});
  ASSERT_EQ(pred.size(), 2u);
  EXPECT_EQ(pred[0].config, seen);
  for (int t = 0; t < kTiers; ++t) {
    EXPECT_DOUBLE_EQ(pred[0].log_duration_mean[t], std::log(h[5].metrics.duration_s[t]));
    EXPECT_GT(pred[0].log_duration_std[t], 0);
    EXPECT_LT(pred[0].log_duration_std[t], 0.2);
    // The unseen config lies between its neighbours 4 and 16 requests.
    const double lo = std::log(h[6].metrics.duration_s[t]), hi = std::log(h[5].metrics.duration_s[t]);
    EXPECT_GT(pred[1].log_duration_mean[t], lo - 0.1);
    EXPECT_LT(pred[1].log_duration_mean[t], hi + 0.1);
    EXPECT_TRUE(std::isfinite(pred[1].log_duration_std[t]));
  }
  EXPECT_DOUBLE_EQ(pred[0].accuracy_mean_pct, h[5].metrics.relative_accuracy_pct);
  EXPECT_NEAR(pred[1].accuracy_mean_pct, 99.7, 0.5);
  EXPECT_GT(pred[1].accuracy_std_pct, 0);
  // Failure probability is higher next to the failed config than far from it.
  const auto fail = predict(p, h, {{{"weight_bits", int64_t{4}}, {"max_running_requests", int64_t{32}}},
                                    {{"weight_bits", int64_t{16}}, {"max_running_requests", int64_t{2}}}});
  EXPECT_GT(fail[0].p_failure, fail[1].p_failure);
}

TEST(Predict, EmptyHistoryIsFinite) {
  auto s = Space::parse(YAML::Load("cuda_graphs: {type: bool}"));
  ASSERT_TRUE(s.ok());
  SearchProblem p;
  p.space = s.value();
  const auto pred = predict(p, {}, {{{"cuda_graphs", true}}});
  ASSERT_EQ(pred.size(), 1u);
  EXPECT_TRUE(std::isfinite(pred[0].log_duration_mean[0]));
  EXPECT_TRUE(std::isfinite(pred[0].accuracy_std_pct));
}

}  // namespace
}  // namespace soartune::search
