// The lightning-attention CPU twins (kernels/lightning_ref.h) against the engine's CPU math
// (engine/lightning_attention.h, itself checked against the independent tiny-sala reference), and against
// cases known by hand (label unit: runs without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/lightning_attention.h"
#include "kernels/lightning_ref.h"
#include "kernels/numeric_formats.h"
#include "kernels/ops_ref.h"

namespace soartune::kernels {
namespace {

std::vector<float> random_bf16_values(std::mt19937_64& rng, size_t n, float a) {
  std::uniform_real_distribution<float> u(-a, a);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(u(rng)));
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

// One sequence of n tokens through the twin, heads query heads over kv_heads kv heads.
struct Case {
  int heads = 2, kv_heads = 1, d = 16, n = 1, chunk = 16;
  bool bf16_state = false;
};

// The twin's lightning_ref on one sequence starting at `start_pos`, state carried in `state`.
std::vector<float> run_twin(const Case& c, const std::vector<float>& qkv, std::vector<float>* state, int start_pos,
                            const std::vector<float>& log_decay, float scale) {
  const int width = (c.heads + 2 * c.kv_heads) * c.d;
  std::vector<float> out(size_t(c.n) * c.heads * c.d, NAN);
  const std::vector<int32_t> offsets = {0, c.n}, starts = {start_pos}, slots = {0};
  LightningRefArgs a;
  a.qkv = qkv.data(), a.row_stride = width, a.out = out.data(), a.state = state->data();
  a.bf16_state = c.bf16_state, a.q_offsets = offsets.data(), a.start_pos = starts.data();
  a.seq_slots = slots.data(), a.log_decay = log_decay.data(), a.scale = scale, a.batch = 1, a.chunk = c.chunk;
  a.heads = c.heads, a.kv_heads = c.kv_heads, a.head_dim = c.d;
  lightning_ref(a);
  return out;
}

TEST(LightningRef, MatchesTheEngineHeadByHeadInEveryFormOfTheStep) {
  std::mt19937_64 rng(18);
  const float scale = 0.25f;
  for (const bool bf16_state : {false, true})
    for (const int chunk : {16, 32, 64})
      for (const int n : {1, 7, 37, 130}) {
        const Case c{4, 2, 16, n, chunk, bf16_state};
        SCOPED_TRACE("n " + std::to_string(n) + " chunk " + std::to_string(chunk) + " bf16 state " +
                     std::to_string(bf16_state));
        const int width = (c.heads + 2 * c.kv_heads) * c.d;
        const auto qkv = random_bf16_values(rng, size_t(n) * width, 1.f);
        const std::vector<float> g = {-0.5f, -0.0625f, -0.015625f, -0.00390625f};
        // A nonzero incoming state (start_pos > 0), bf16 values when the state is bf16.
        auto state0 = random_bf16_values(rng, size_t(c.heads) * c.d * c.d, 0.5f);
        auto state = state0;
        const auto out = run_twin(c, qkv, &state, 5, g, scale);
        std::vector<float> scratch(engine::lightning_scratch_floats(chunk, c.d));
        for (int h = 0; h < c.heads; ++h) {
          std::vector<float> S(state0.begin() + h * c.d * c.d, state0.begin() + (h + 1) * c.d * c.d);
          std::vector<float> o(size_t(n) * c.d);
          const int kvh = h / (c.heads / c.kv_heads);
          engine::LightningHeadArgs e;
          e.q = qkv.data() + h * c.d, e.k = qkv.data() + (c.heads + kvh) * c.d;
          e.v = qkv.data() + (c.heads + c.kv_heads + kvh) * c.d;
          e.q_stride = e.k_stride = e.v_stride = width;
          e.out = o.data(), e.out_stride = c.d, e.state = S.data(), e.n = n, e.dim = c.d, e.log_decay = g[h];
          e.scale = scale, e.bf16_state = bf16_state;
          engine::lightning_head(e, chunk, scratch.data());
          std::vector<float> twin_o(size_t(n) * c.d), twin_S(state.begin() + h * c.d * c.d,
                                                             state.begin() + (h + 1) * c.d * c.d);
          for (int t = 0; t < n; ++t)
            for (int w = 0; w < c.d; ++w) twin_o[t * c.d + w] = out[(t * c.heads + h) * c.d + w];
          EXPECT_LT(max_abs_diff(twin_o, o), 2e-5) << "head " << h;
          // A bf16 state may differ by one bf16 step where fp32 summation orders round differently.
          EXPECT_LT(max_abs_diff(twin_S, S), bf16_state ? 1.6e-2 : 2e-5) << "head " << h;
        }
      }
}

TEST(LightningRef, ChunkedPrefillEqualsTokenByTokenDecodeAndResetsAtPositionZero) {
  std::mt19937_64 rng(7);
  const Case pre{2, 2, 8, 50, 16, false};
  const int width = (pre.heads + 2 * pre.kv_heads) * pre.d;
  const auto qkv = random_bf16_values(rng, size_t(pre.n) * width, 1.f);
  const std::vector<float> g = {-0.25f, -0.01f};
  // start_pos 0 resets whatever the slot held.
  std::vector<float> s_chunked(size_t(pre.heads) * pre.d * pre.d, 123.f);
  const auto o_chunked = run_twin(pre, qkv, &s_chunked, 0, g, 0.5f);
  std::vector<float> s_steps(s_chunked.size(), 0.f);
  Case one = pre;
  one.n = 1;
  for (int t = 0; t < pre.n; ++t) {
    const std::vector<float> row(qkv.begin() + t * width, qkv.begin() + (t + 1) * width);
    const auto o = run_twin(one, row, &s_steps, t, g, 0.5f);
    for (int i = 0; i < pre.heads * pre.d; ++i)
      EXPECT_NEAR(o[i], o_chunked[t * pre.heads * pre.d + i], 1e-5) << "token " << t << " column " << i;
  }
  EXPECT_LT(max_abs_diff(s_steps, s_chunked), 1e-5);
}

TEST(LightningRef, BF16StateIsRoundedAfterEveryChunk) {
  // One head, d 2, zero q / k / v, so that each chunk only decays the state, by (1 - 2^-11) a token. A chunk of 2
  // tokens takes 1.0 to 0.99902, which rounds back to bf16 1.0 (the spacing below 1 is 2^-8): rounded after every
  // chunk, the state stays 1.0 through 10 chunks; in fp32 it reaches (1 - 2^-11)^20 = 0.99028.
  const Case c{1, 1, 2, 20, 2, true};
  const std::vector<float> qkv(size_t(20) * 6, 0.f);
  const float g = float(std::log(1.0 - 1.0 / 2048));
  std::vector<float> state(4, 1.f);
  run_twin(c, qkv, &state, 1, {g}, 1.f);
  for (float s : state) EXPECT_EQ(s, 1.f);
  Case f = c;
  f.bf16_state = false;
  std::vector<float> fs(4, 1.f);
  run_twin(f, qkv, &fs, 1, {g}, 1.f);
  for (float s : fs) EXPECT_NEAR(s, std::pow(1.0 - 1.0 / 2048, 20), 1e-6);
}

TEST(LightningRef, DecodeOutputReadsTheFp32StateThenStoresItRoundedToBf16) {
  // One head, d 2, from a reset state: k = v = 1 + 2^-7 (bf16 values) make S[0][0] = 1 + 2^-6 + 2^-14, which
  // bf16 (8 significant bits) cannot hold: it stores 1 + 2^-6. The output q S with q = (1, 0) is taken from
  // the fp32 sum, before the store rounds it; rounding first would give 1 + 2^-6.
  const float x = 1.f + 1.f / 128;
  const Case c{1, 1, 2, 1, 16, true};
  const std::vector<float> qkv = {1.f, 0.f, x, 0.f, x, 0.f};  // q | k | v
  std::vector<float> state(4, 7.f);                          // dropped: start_pos 0 resets
  const auto out = run_twin(c, qkv, &state, 0, {-0.5f}, 1.f);
  EXPECT_EQ(out[0], x * x);
  EXPECT_EQ(out[1], 0.f);
  EXPECT_EQ(state[0], 1.f + 1.f / 64);
  EXPECT_EQ(state[1], 0.f);
  EXPECT_EQ(state[2], 0.f);
  EXPECT_EQ(state[3], 0.f);
}

TEST(LightningQkRef, NormsEachHeadThenRotatesAsTheRopeTwin) {
  std::mt19937_64 rng(3);
  const int heads = 2, kv_heads = 1, d = 8, width = (heads + 2 * kv_heads) * d;
  auto qkv = random_bf16_values(rng, width, 2.f);
  auto rotated = qkv;
  const std::vector<int32_t> pos = {11};
  // Without gammas: the RoPE twin of the softmax layers, and v untouched.
  lightning_qk_ref(rotated.data(), width, nullptr, nullptr, pos.data(), true, 10000.f, 1e-6f, 1, heads, kv_heads, d);
  auto expect = qkv;
  rope_ref(expect.data(), heads, kv_heads, d, 11, 10000.f);
  for (int i = 0; i < width; ++i) EXPECT_NEAR(rotated[i], expect[i], 1e-6) << i;
  // With gammas and no RoPE: each q / k head has mean square gamma^2.
  std::vector<float> gq(d, 2.f), gk(d, 0.5f), normed = qkv;
  lightning_qk_ref(normed.data(), width, gq.data(), gk.data(), pos.data(), false, 10000.f, 0.f, 1, heads, kv_heads, d);
  for (int h = 0; h < heads + kv_heads; ++h) {
    double ms = 0;
    for (int c = 0; c < d; ++c) ms += double(normed[h * d + c]) * normed[h * d + c] / d;
    EXPECT_NEAR(ms, h < heads ? 4.0 : 0.25, 1e-5) << "head " << h;
  }
  for (int i = (heads + kv_heads) * d; i < width; ++i) EXPECT_EQ(normed[i], qkv[i]);
}

TEST(OutputGateRef, NormsTheWholeRowThenGates) {
  // Row [3, 4]: mean square 12.5; gate 0 halves it.
  const std::vector<float> attn = {3, 4}, gate = {0, 100}, gamma = {1, 2};
  std::vector<float> out(2);
  output_gate_ref(attn.data(), gate.data(), 2, gamma.data(), 1, 2, 0.f, out.data());
  EXPECT_NEAR(out[0], 3 / std::sqrt(12.5) * 0.5, 1e-6);
  EXPECT_NEAR(out[1], 4 / std::sqrt(12.5) * 2, 1e-6);
  // No norm: only the gate (the softmax layers' o_gate).
  output_gate_ref(attn.data(), gate.data(), 2, nullptr, 1, 2, 1e-6f, out.data());
  EXPECT_NEAR(out[0], 1.5, 1e-6);
  EXPECT_NEAR(out[1], 4, 1e-6);
}

}  // namespace
}  // namespace soartune::kernels
