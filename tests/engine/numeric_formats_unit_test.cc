#include "kernels/numeric_formats.h"

#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace soartune::kernels {
namespace {

// The representable value nearest to f (ties to the even code) by brute force over every code.
template <typename Decode>
uint32_t nearest_code(float f, int codes, Decode decode) {
  uint32_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c < codes; ++c) {
    const float v = decode(static_cast<uint32_t>(c));
    if (!std::isfinite(v)) continue;
    const double err = std::fabs(static_cast<double>(v) - f);
    if (err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best_err = err;
      best = static_cast<uint32_t>(c);
    }
  }
  return best;
}

TEST(NumericFormats, EveryCodeRoundTrips) {
  for (int c = 0; c < 65536; ++c) {
    const float b = bf16_to_f32(static_cast<uint16_t>(c));
    if (!std::isnan(b)) EXPECT_EQ(f32_to_bf16(b), c);
    const float h = fp16_to_f32(static_cast<uint16_t>(c));
    if (!std::isnan(h)) EXPECT_EQ(f32_to_fp16(h), c) << c;
  }
  for (int c = 0; c < 256; ++c) {
    const float a = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    if (!std::isnan(a)) EXPECT_EQ(f32_to_fp8_e4m3(a), c) << c;
    const float b = fp8_e5m2_to_f32(static_cast<uint8_t>(c));
    if (!std::isnan(b)) EXPECT_EQ(f32_to_fp8_e5m2(b), c) << c;
  }
}

TEST(NumericFormats, KnownValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.f, -9));   // smallest subnormal
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.f);
  EXPECT_EQ(fp16_to_f32(0x7bff), 65504.f);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(0x7c)));
}

TEST(NumericFormats, TiesRoundToEven) {
  EXPECT_EQ(f32_to_bf16(1.f + std::ldexp(1.f, -8)), 0x3f80);        // halfway 1 and 1+2^-7: even is 1
  EXPECT_EQ(f32_to_bf16(1.f + 3 * std::ldexp(1.f, -8)), 0x3f82);    // halfway 1+2^-7 and 1+2^-6: even is 0x3f82
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);                        // between 1 (0x38) and 1.125 (0x39)
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);                        // between 1.125 and 1.25: even 0x3a
}

TEST(NumericFormats, SaturationAndOverflow) {
  EXPECT_EQ(f32_to_fp8_e4m3(1000.f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(464.f), 0x7e);
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(f32_to_fp8_e5m2(1e6f))));
  EXPECT_TRUE(std::isinf(fp16_to_f32(f32_to_fp16(1e6f))));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(std::nanf("")))));
}

TEST(NumericFormats, RandomValuesRoundToNearest) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.f, 1.f);
  std::uniform_int_distribution<int> ex(-20, 10);
  for (int i = 0; i < 400; ++i) {
    const float f = std::ldexp(mant(rng), ex(rng));
    const float af = std::fabs(f);
    const uint8_t s = f < 0 ? 0x80 : 0;
    if (af <= 448.f)
      EXPECT_EQ(f32_to_fp8_e4m3(f) & 0x7f, nearest_code(af, 127, [](uint32_t c) { return fp8_e4m3_to_f32(static_cast<uint8_t>(c)); })) << f;
    EXPECT_EQ(f32_to_fp8_e5m2(f) & 0x7f, nearest_code(af, 124, [](uint32_t c) { return fp8_e5m2_to_f32(static_cast<uint8_t>(c)); })) << f;
    if (f != 0) EXPECT_EQ(f32_to_fp8_e5m2(f) & 0x80, s);
    // fp16 and bf16: the decoded value is within half a unit in the last place.
    const float h = fp16_to_f32(f32_to_fp16(f));
    EXPECT_LE(std::fabs(h - f), std::max(std::fabs(f) * std::ldexp(1.f, -11), std::ldexp(1.f, -25))) << f;
    const float b = bf16_to_f32(f32_to_bf16(f));
    EXPECT_LE(std::fabs(b - f), std::fabs(f) * std::ldexp(1.f, -8)) << f;
  }
}

}  // namespace
}  // namespace soartune::kernels
