// Lightning attention's chunked prefill form and its decode recurrence against the definition
//   o_t = scale * sum_{j<=t} exp(g (t-j)) (q_t . k_j) v_j  +  scale * exp(g (t+1)) q_t S_0
// computed in double, and against each other across chunk sizes and split points; plus the ALiBi slopes.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/lightning_attention.h"
#include "engine/model_config.h"
#include "kernels/numeric_formats.h"

namespace soartune::engine {
namespace {

constexpr int kD = 16;

struct Inputs {
  int n = 0;
  std::vector<float> q, k, v, s0;   // [n][d] x3, [d][d]
};

Inputs random_inputs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  Inputs in;
  in.n = n;
  for (auto* x : {&in.q, &in.k, &in.v}) {
    x->resize(static_cast<std::size_t>(n) * kD);
    for (float& f : *x) f = nd(rng);
  }
  in.s0.resize(kD * kD);
  for (float& f : in.s0) f = nd(rng);
  return in;
}

// Runs tokens [t0, t1) through lightning_head with `state`, writing rows t0.. of `out`.
void run(const Inputs& in, int t0, int t1, int chunk, float g, float scale, std::vector<float>* state, std::vector<float>* out,
         bool bf16_state = false) {
  LightningHeadArgs a;
  a.q = in.q.data() + t0 * kD;
  a.k = in.k.data() + t0 * kD;
  a.v = in.v.data() + t0 * kD;
  a.q_stride = a.k_stride = a.v_stride = a.out_stride = kD;
  a.out = out->data() + t0 * kD;
  a.state = state->data();
  a.n = t1 - t0;
  a.dim = kD;
  a.log_decay = g;
  a.scale = scale;
  a.bf16_state = bf16_state;
  std::vector<float> scratch(static_cast<std::size_t>(lightning_scratch_floats(chunk, kD)));
  lightning_head(a, chunk, scratch.data());
}

std::vector<double> definition(const Inputs& in, double g, double scale, bool with_state) {
  std::vector<double> o(static_cast<std::size_t>(in.n) * kD, 0.0);
  for (int t = 0; t < in.n; ++t) {
    for (int j = 0; j <= t; ++j) {
      double qk = 0;
      for (int i = 0; i < kD; ++i) qk += double(in.q[t * kD + i]) * in.k[j * kD + i];
      const double w = scale * std::exp(g * (t - j)) * qk;
      for (int i = 0; i < kD; ++i) o[t * kD + i] += w * in.v[j * kD + i];
    }
    if (with_state)
      for (int c = 0; c < kD; ++c) {
        double acc = 0;
        for (int r = 0; r < kD; ++r) acc += double(in.q[t * kD + r]) * in.s0[r * kD + c];
        o[t * kD + c] += scale * std::exp(g * (t + 1)) * acc;
      }
  }
  return o;
}

double max_rel(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return diff / scale;
}

TEST(LightningAttention, ChunkedAndRecurrentFormsEqualTheDefinition) {
  const int n = 150;
  const Inputs in = random_inputs(n, 7);
  const float scale = 1.f / std::sqrt(static_cast<float>(kD));
  for (float g : {-0.25f, -1.f / 256.f, -0.8409f}) {
    for (bool with_state : {false, true}) {
      const std::vector<double> want = definition(in, g, scale, with_state);
      const std::vector<float> s0 = with_state ? in.s0 : std::vector<float>(kD * kD, 0.f);
      // One prefill call with chunks of 64 (two full chunks and a partial one).
      std::vector<float> state = s0, chunked(want.size());
      run(in, 0, n, 64, g, scale, &state, &chunked);
      EXPECT_LE(max_rel(chunked, want), 2e-6) << "g " << g;
      // Token by token: the decode recurrence.
      std::vector<float> rstate = s0, recurrent(want.size());
      for (int t = 0; t < n; ++t) run(in, t, t + 1, 64, g, scale, &rstate, &recurrent);
      EXPECT_LE(max_rel(recurrent, want), 2e-6) << "g " << g;
      // Chunked prefill split across calls (as the scheduler splits a prompt), odd chunk, then decode.
      std::vector<float> sstate = s0, split(want.size());
      run(in, 0, 37, 16, g, scale, &sstate, &split);
      run(in, 37, 120, 16, g, scale, &sstate, &split);
      for (int t = 120; t < n; ++t) run(in, t, t + 1, 16, g, scale, &sstate, &split);
      EXPECT_LE(max_rel(split, want), 2e-6) << "g " << g;
      // All three leave the same state.
      double sdiff = 0, smax = 0;
      for (std::size_t i = 0; i < state.size(); ++i) {
        sdiff = std::max({sdiff, double(std::fabs(state[i] - rstate[i])), double(std::fabs(state[i] - sstate[i]))});
        smax = std::max(smax, double(std::fabs(rstate[i])));
      }
      EXPECT_LE(sdiff / smax, 2e-6);
    }
  }
}

bool all_bf16(const std::vector<float>& x) {
  for (float f : x)
    if (kernels::bf16_to_f32(kernels::f32_to_bf16(f)) != f) return false;
  return true;
}

// A bf16 state: every stored state is a bf16 value, each recurrence step reads the rounded state, and the
// outputs stay near the fp32 state's (rounding each step is relative 2^-9 per element, not a drift in kind).
TEST(LightningAttention, Bf16StateIsRoundedAfterEveryUpdate) {
  const int n = 150;
  const Inputs in = random_inputs(n, 11);
  const float scale = 1.f / std::sqrt(static_cast<float>(kD)), g = -1.f / 16.f;
  const std::vector<double> want = definition(in, g, scale, false);
  // Decode: the state after every step is bf16; the outputs differ from fp32 but only by rounding.
  std::vector<float> state(kD * kD, 0.f), out(want.size());
  for (int t = 0; t < n; ++t) {
    run(in, t, t + 1, 64, g, scale, &state, &out, true);
    ASSERT_TRUE(all_bf16(state)) << "after token " << t;
  }
  const double decode_err = max_rel(out, want);
  std::printf("bf16 state, decode: max relative output error %.3g\n", decode_err);
  EXPECT_GT(decode_err, 1e-5);   // the rounding is real (fp32 state: 2e-6)
  EXPECT_LE(decode_err, 2e-2);
  // Chunked prefill: rounded once per chunk, so fewer roundings with larger chunks; bf16 either way.
  for (int chunk : {32, 64, 128}) {
    std::vector<float> cs(kD * kD, 0.f), co(want.size());
    run(in, 0, n, chunk, g, scale, &cs, &co, true);
    EXPECT_TRUE(all_bf16(cs)) << "chunk " << chunk;
    EXPECT_LE(max_rel(co, want), 2e-2) << "chunk " << chunk;
  }
  // An fp32 state is not rounded.
  std::vector<float> fs(kD * kD, 0.f), fo(want.size());
  run(in, 0, n, 64, g, scale, &fs, &fo, false);
  EXPECT_FALSE(all_bf16(fs));
}

TEST(LightningAttention, AlibiSlopes) {
  const auto s4 = alibi_slopes(4);
  ASSERT_EQ(s4.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(s4[static_cast<std::size_t>(i)], std::pow(4.0, -(i + 1)));
  const auto s32 = alibi_slopes(32);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(s32[static_cast<std::size_t>(i)], std::pow(2.0, -(i + 1) / 4.0), 1e-15);
  // Not a power of two: slopes(8) then every other slope of slopes(16).
  const auto s12 = alibi_slopes(12), s8 = alibi_slopes(8), s16 = alibi_slopes(16);
  ASSERT_EQ(s12.size(), 12u);
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(s12[static_cast<std::size_t>(i)], s8[static_cast<std::size_t>(i)]);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(s12[static_cast<std::size_t>(8 + i)], s16[static_cast<std::size_t>(2 * i)]);
}

}  // namespace
}  // namespace soartune::engine
