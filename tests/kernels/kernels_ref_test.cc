// The CPU twins themselves, on cases whose answers are known by hand (label unit: runs without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/gemv_ref.h"
#include "kernels/numeric_formats.h"
#include "kernels/ops_ref.h"

namespace soartune::kernels {
namespace {

TEST(Int4Packing, RoundTripsEveryCodeAndPosition) {
  std::mt19937 rng(3);
  // -8 too: RTN never makes it, an imported GPTQ checkpoint may (code 0 of its 0..15).
  std::uniform_int_distribution<int> d(-8, 7);
  const int n = 3, k = 96;
  std::vector<int8_t> q(n * k);
  for (auto& v : q) v = int8_t(d(rng));
  std::vector<uint8_t> packed(n * k / 2);
  pack_int4_rows(q.data(), n, k, packed.data());
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) ASSERT_EQ(int4_code_at(packed.data(), k, r, c), q[r * k + c]) << r << "," << c;
  // Elements 0 and 1 of a block share the low nibbles of word 0's two halves.
  std::vector<int8_t> one(32, 0);
  one[0] = 1, one[1] = -1;
  std::vector<uint8_t> p(16);
  pack_int4_rows(one.data(), 1, 32, p.data());
  EXPECT_EQ(p[0] & 0xF, 9);
  EXPECT_EQ(p[2] & 0xF, 7);
}

TEST(LinearRef, MatchesAHandComputedProductInEveryFormat) {
  // W = [[1, 2], [-3, 0.5]] padded to k = 32 with zeros; x = [2, 1, 0...].
  const int n = 2, k = 32;
  std::vector<float> x(k, 0.f);
  x[0] = 2, x[1] = 1;
  std::vector<uint16_t> wb(n * k, f32_to_bf16(0.f));
  wb[0] = f32_to_bf16(1), wb[1] = f32_to_bf16(2), wb[k] = f32_to_bf16(-3), wb[k + 1] = f32_to_bf16(0.5f);
  std::vector<float> y(2);
  linear_ref({WeightFormat::kBf16, n, k, 0, wb.data(), nullptr}, x.data(), 1, y.data());
  EXPECT_FLOAT_EQ(y[0], 4.f);
  EXPECT_FLOAT_EQ(y[1], -5.5f);
  // int8 codes [[2, 4], [-6, 1]] with scales 0.5 per row: the same matrix.
  std::vector<int8_t> q(n * k, 0);
  q[0] = 2, q[1] = 4, q[k] = -6, q[k + 1] = 1;
  std::vector<float> s = {0.5f, 0.5f};
  linear_ref({WeightFormat::kInt8, n, k, k, q.data(), s.data()}, x.data(), 1, y.data());
  EXPECT_FLOAT_EQ(y[0], 4.f);
  EXPECT_FLOAT_EQ(y[1], -5.5f);
  std::vector<uint8_t> p(n * k / 2);
  pack_int4_rows(q.data(), n, k, p.data());
  linear_ref({WeightFormat::kInt4, n, k, 32, p.data(), s.data()}, x.data(), 1, y.data());
  EXPECT_FLOAT_EQ(y[0], 4.f);
  EXPECT_FLOAT_EQ(y[1], -5.5f);
}

TEST(OpsRef, RmsNormOfAConstantRowIsGamma) {
  std::vector<float> r(8, 3.f), g = {1, 2, 3, 4, 5, 6, 7, 8}, out(8);
  rmsnorm_residual_ref(r.data(), nullptr, g.data(), 1, 8, 0.f, out.data());
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(out[i], g[i], 1e-6);
}

TEST(OpsRef, RopeIsIdentityAtPositionZeroAndKeepsNorms) {
  std::vector<float> row = {1, 2, 3, 4, 5, 6, 7, 8}, orig = row;
  rope_ref(row.data(), 1, 1, 4, 0, 10000.f);
  EXPECT_EQ(row, orig);
  rope_ref(row.data(), 1, 1, 4, 123, 10000.f);
  // Pairs (j, j + half) rotate: their norm stays.
  EXPECT_NEAR(row[0] * row[0] + row[2] * row[2], 1 + 9, 1e-4);
  EXPECT_NEAR(row[5] * row[5] + row[7] * row[7], 36 + 64, 1e-4);
}

TEST(OpsRef, ArgmaxTakesTheLowestIdOfATieAndSkipsNaN) {
  std::vector<float> l = {1, 5, 5, NAN, 2, NAN, NAN, -1};
  std::vector<int32_t> out(2);
  argmax_ref(l.data(), 2, 4, out.data());
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 0);
}

TEST(OpsRef, SwigluOfZeroGateIsZero) {
  std::vector<float> gu = {0, 10, 5, 5}, out(2);
  swiglu_ref(gu.data(), 1, 2, out.data());
  EXPECT_FLOAT_EQ(out[0], 0.f);
  EXPECT_NEAR(out[1], 10 / (1 + std::exp(-10.0)) * 5, 1e-4);
}

}  // namespace
}  // namespace soartune::kernels
