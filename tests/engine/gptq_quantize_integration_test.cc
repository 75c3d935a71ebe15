// GPTQ (engine/gptq_quantize.h): on one linear it equals RTN when the inputs are uncorrelated and beats it on
// the layer's output when they are correlated; on the shared tiny model, W4 g128 GPTQ agrees with the 16-bit
// model's teacher-forced top-1 more often than RTN, calibrated on eval rows the agreement is not measured on.
#include <chrono>
#include <cstdio>
#include <random>

#include <Eigen/Dense>
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/gptq_quantize.h"
#include "engine/model_loader.h"
#include "engine/quantize.h"
#include "kernels/numeric_formats.h"
#include "engine_runs.h"
#include "tiny_model.h"

namespace soartune::engine {
namespace {

using testing::read_jsonl;
using testing::tiny_model_dir;

QuantizedLinear random_linear(int out, int in, std::mt19937& rng) {
  std::normal_distribution<float> n(0.f, 0.05f);
  QuantizedLinear l;
  l.out = out;
  l.in = in;
  for (int k = 0; k < out * in; ++k) l.w16.push_back(kernels::f32_to_bf16(n(rng)));
  return l;
}

Eigen::MatrixXf weights(const QuantizedLinear& l) {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> w(l.out, l.in);
  dequantize_rows(l, 0, l.out, w.data());
  return w;
}

std::vector<double> hessian_of(const Eigen::MatrixXf& x) {
  const Eigen::MatrixXd h = 2.0 / static_cast<double>(x.rows()) * (x.cast<double>().transpose() * x.cast<double>());
  return {h.data(), h.data() + h.size()};
}

TEST(GptqLinear, EqualsRtnWhenTheHessianIsDiagonal) {
  std::mt19937 rng(1);
  const QuantizedLinear l = random_linear(48, 256, rng);
  QuantizedLinear rtn = l, gptq = l;
  ASSERT_TRUE(quantize_linear(rtn, 4, 64).ok());
  std::vector<double> h(256 * 256, 0.0);
  for (int i = 0; i < 256; ++i) h[static_cast<std::size_t>(i) * 257] = 1.0 + i % 7;   // no correlations: nothing to compensate
  ASSERT_TRUE(gptq_quantize_linear(gptq, 4, 64, h, {}).ok());
  EXPECT_TRUE(gptq.q == rtn.q);
  EXPECT_TRUE(gptq.scales == rtn.scales);
}

TEST(GptqLinear, LowersTheOutputErrorOnCorrelatedInputs) {
  std::mt19937 rng(2);
  const QuantizedLinear l = random_linear(64, 256, rng);
  // Correlated inputs: 512 samples of a 32-dimensional latent mixed into 256 inputs, plus noise.
  std::normal_distribution<float> n(0.f, 1.f);
  Eigen::MatrixXf z(512, 32), mix(32, 256), noise(512, 256);
  for (int i = 0; i < z.size(); ++i) z.data()[i] = n(rng);
  for (int i = 0; i < mix.size(); ++i) mix.data()[i] = n(rng);
  for (int i = 0; i < noise.size(); ++i) noise.data()[i] = 0.1f * n(rng);
  const Eigen::MatrixXf x = z * mix + noise;
  QuantizedLinear rtn = l, gptq = l;
  ASSERT_TRUE(quantize_linear(rtn, 4, 64).ok());
  ASSERT_TRUE(gptq_quantize_linear(gptq, 4, 64, hessian_of(x), {}).ok());
  const Eigen::MatrixXf y = x * weights(l).transpose();
  const double e_rtn = (x * weights(rtn).transpose() - y).squaredNorm(), e_gptq = (x * weights(gptq).transpose() - y).squaredNorm();
  std::printf("output squared error: rtn %.4g, gptq %.4g\n", e_rtn, e_gptq);
  EXPECT_LT(e_gptq, 0.5 * e_rtn);
  // The codes stay on the format's symmetric grid.
  for (int8_t q : gptq.q) EXPECT_LE(std::abs(static_cast<int>(q)), 7);
}

constexpr int kPassages = 16;      // the measured rows: eval_public.jsonl 0..15
constexpr int kCalibration = 16;   // calibration rows: 16..31, never measured

std::vector<std::vector<int32_t>> top1(const ModelWeights& w, const LaunchConfig& launch) {
  return testing::tiny_model_top1(w, launch, kPassages);
}

double agreement_pct(const std::vector<std::vector<int32_t>>& a, const std::vector<std::vector<int32_t>>& b) {
  return testing::agreement(a, b).pct();
}

TEST(GptqModel, W4G128AgreesWithSixteenBitMoreThanRtn) {
  SKIP_WITHOUT_TINY_MODEL();
  auto base = load_model("hf:" + tiny_model_dir());
  ASSERT_TRUE(base.ok()) << base.status().message;
  const auto rows = read_jsonl(tiny_model_dir() + "/eval_public.jsonl");
  std::vector<std::vector<int32_t>> calibration;
  for (int i = kPassages; i < kPassages + kCalibration; ++i) {
    std::vector<int32_t> s = rows[i]["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t t : rows[i]["continuation_ids"].get<std::vector<int32_t>>()) s.push_back(t);
    calibration.push_back(std::move(s));
  }
  LaunchConfig w4;
  w4.weight_bits = 4;
  w4.weight_group_size = 128;
  const auto ref = top1(base.value(), LaunchConfig::reference());
  ModelWeights rtn = base.value(), gptq = base.value();
  ASSERT_TRUE(quantize_model(rtn, w4).ok());
  const auto t0 = std::chrono::steady_clock::now();
  // Damping 10% of the mean diagonal: on this model 1% (the paper's default) gains about 3 points over RTN
  // with 16 to 40 calibration rows, 10% about 4.5 (measured 2026-12-04; the gain moves by about a point with
  // the calibration rows). It moves with the arithmetic's evaluation order too: the same sources built
  // RelWithDebInfo with AddressSanitizer gave GPTQ 85.45% against the Release build's 86.72% (RTN 82.23% in
  // both, 2026-12-08), GPTQ's column-by-column error feedback turning a last-bit difference into other
  // roundings. Hence a line of 2 points: above that noise, below both builds' gains (3.2 and 4.5).
  GptqOptions options;
  options.damp_pct = 10.0;
  const Status s = gptq_quantize_model(gptq, w4, calibration, options);
  ASSERT_TRUE(s.ok()) << s.message;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double a_rtn = agreement_pct(ref, top1(rtn, w4)), a_gptq = agreement_pct(ref, top1(gptq, w4));
  std::printf("top-1 agreement with 16-bit, W4 g128: rtn %.2f%%, gptq %.2f%% (gptq took %.1f s, %d calibration rows, damp 10%%)\n",
              a_rtn, a_gptq, secs, kCalibration);
  EXPECT_GE(a_gptq, a_rtn + 2.0);
}

// The solver interface: the model's default is the CPU solver, which counts the work it did per stage (the
// GPU solver, tests/kernels/gptq_cuda_gpu_test.cc, is held to its results).
TEST(GptqModel, TheCpuSolverIsTheDefaultAndCountsItsStages) {
  auto base = load_model("synthetic:tiny", 3);
  ASSERT_TRUE(base.ok()) << base.status().message;
  std::vector<std::vector<int32_t>> calibration = {{1, 5, 9, 13, 17, 21, 25, 29}, {2, 4, 8, 16, 32, 64}};
  LaunchConfig w4;
  w4.weight_bits = 4;
  w4.weight_group_size = 64;
  ModelWeights a = base.value(), b = base.value();
  ASSERT_TRUE(gptq_quantize_model(a, w4, calibration).ok());
  auto cpu = make_cpu_gptq_solver();
  ASSERT_TRUE(gptq_quantize_model(b, w4, calibration, {}, cpu.get()).ok());
  EXPECT_EQ(cpu->name(), "cpu");
  const int layers = static_cast<int>(a.layers.size());
  EXPECT_EQ(cpu->seconds().linears, 7 * layers);    // q, k, v, o, gate, up, down
  EXPECT_EQ(cpu->seconds().hessians, 4 * layers);   // one per input: q/k/v, o, gate/up, down
  EXPECT_EQ(cpu->seconds().forwards, 7 * layers);   // each linear's product, after it is quantised
  EXPECT_GT(cpu->seconds().cholesky, 0.0);
  for (int i = 0; i < layers; ++i) {
    EXPECT_EQ(a.layers[i].wq.q, b.layers[i].wq.q);
    EXPECT_EQ(a.layers[i].w_down.q, b.layers[i].w_down.q);
    EXPECT_EQ(a.layers[i].w_down.scales, b.layers[i].w_down.scales);
  }
}

// Calibration that carries no information is refused, not turned into weights: without tokens every input
// would count as dead (all weights zeroed); a non-finite activation would pass the Cholesky factorisations
// (a NaN fails no pivot test) and give codes from NaN.
TEST(GptqModel, RefusesCalibrationWithoutTokens) {
  auto w = load_model("synthetic:tiny", 3);
  ASSERT_TRUE(w.ok()) << w.status().message;
  LaunchConfig w4;
  w4.weight_bits = 4;
  const Status s = gptq_quantize_model(w.value(), w4, {{}, {}});
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_EQ(s.message.rfind("calibration:", 0), 0u) << s.message;
  EXPECT_EQ(w.value().layers[0].wq.bits, 16);
}

TEST(GptqModel, RefusesActivationsThatAreNotFinite) {
  auto w = load_model("synthetic:tiny", 3);
  ASSERT_TRUE(w.ok()) << w.status().message;
  QuantizedLinear& embed = w.value().embed;
  ASSERT_EQ(embed.bits, 16);
  const uint16_t nan16 = embed.dtype16 == Dtype16::kBF16 ? 0x7fc0 : 0x7e00;
  for (int i = 0; i < embed.in; ++i) embed.w16[static_cast<std::size_t>(7) * embed.in + i] = nan16;   // token 7's row
  LaunchConfig w4;
  w4.weight_bits = 4;
  const Status s = gptq_quantize_model(w.value(), w4, {{1, 2, 3}, {4, 7, 5}});
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_NE(s.message.find("not finite"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("layer 0"), std::string::npos) << s.message;
}

TEST(GptqLinear, RefusesAHessianOfAnotherWidth) {
  std::mt19937 rng(3);
  QuantizedLinear l = random_linear(8, 64, rng);
  const Status s = gptq_quantize_linear(l, 4, 32, std::vector<double>(32 * 32, 1.0), {});
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_EQ(l.bits, 16);
}

TEST(GptqModel, RefusesMiniCpmSala) {
  auto w = load_model("synthetic:tiny-sala");
  ASSERT_TRUE(w.ok()) << w.status().message;
  LaunchConfig w4;
  w4.weight_bits = 4;
  const Status s = gptq_quantize_model(w.value(), w4, {{1, 2, 3}});
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_EQ(s.message.rfind("launch.quant_method:", 0), 0u) << s.message;
}

}  // namespace
}  // namespace soartune::engine
