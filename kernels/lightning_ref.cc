#include "kernels/lightning_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/numeric_formats.h"

namespace soartune::kernels {

namespace {

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

void rmsnorm_rope_head(float* x, const float* gamma, int pos, bool rope, float theta, float eps, int d) {
  if (gamma) {
    double ss = 0;
    for (int c = 0; c < d; ++c) ss += double(x[c]) * x[c];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int c = 0; c < d; ++c) x[c] = float(x[c] * inv * gamma[c]);
  }
  if (!rope) return;
  const int half = d / 2;
  for (int j = 0; j < half; ++j) {
    const double a = pos * std::pow(double(theta), -2.0 * j / d);
    const double c = std::cos(a), s = std::sin(a);
    const double x1 = x[j], x2 = x[j + half];
    x[j] = float(x1 * c - x2 * s);
    x[j + half] = float(x2 * c + x1 * s);
  }
}

// One head of one sequence: n tokens, rows of q / k / v / out `stride` apart, state S [d][d] in place.
struct HeadView {
  const float *q, *k, *v;
  int64_t stride;
  float* out;
  int64_t out_stride;
  float* S;
};

void recurrent_step(const HeadView& h, int d, double g, float scale, bool bf16_state) {
  const float decay = float(std::exp(g));
  for (int i = 0; i < d; ++i)
    for (int w = 0; w < d; ++w) h.S[i * d + w] = float(double(decay) * h.S[i * d + w] + double(h.k[i]) * h.v[w]);
  // The output reads the fp32 state before it is stored (and rounded, with a bf16 state).
  for (int w = 0; w < d; ++w) {
    double acc = 0;
    for (int i = 0; i < d; ++i) acc += double(h.q[i]) * h.S[i * d + w];
    h.out[w] = float(scale * acc);
  }
  if (bf16_state)
    for (int i = 0; i < d * d; ++i) h.S[i] = round_bf16(h.S[i]);
}

void chunked(const HeadView& h, int n, int d, int chunk, double g, float scale, bool bf16_state) {
  std::vector<double> pw(chunk + 1), A(size_t(chunk) * chunk), Snew(size_t(d) * d);
  for (int m = 0; m <= chunk; ++m) pw[m] = std::exp(g * m);
  for (int c0 = 0; c0 < n; c0 += chunk) {
    const int C = std::min(chunk, n - c0);
    auto q = [&](int i) { return h.q + (c0 + i) * h.stride; };
    auto k = [&](int i) { return h.k + (c0 + i) * h.stride; };
    auto v = [&](int i) { return h.v + (c0 + i) * h.stride; };
    // Intra-chunk scores A[i][j] = exp((i - j) g) (q_i . k_j), j <= i.
    for (int i = 0; i < C; ++i)
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += double(q(i)[c]) * k(j)[c];
        A[size_t(i) * chunk + j] = pw[i - j] * dot;
      }
    // o_i = scale (exp((i + 1) g) q_i S + sum_{j <= i} A[i][j] v_j), S as it was before the chunk.
    for (int i = 0; i < C; ++i)
      for (int w = 0; w < d; ++w) {
        double inter = 0, intra = 0;
        for (int c = 0; c < d; ++c) inter += double(q(i)[c]) * h.S[c * d + w];
        for (int j = 0; j <= i; ++j) intra += A[size_t(i) * chunk + j] * v(j)[w];
        h.out[(c0 + i) * h.out_stride + w] = float(scale * (pw[i + 1] * inter + intra));
      }
    // S = exp(C g) S + sum_j exp((C - 1 - j) g) k_j^T v_j.
    for (int c = 0; c < d; ++c)
      for (int w = 0; w < d; ++w) {
        double acc = pw[C] * h.S[c * d + w];
        for (int j = 0; j < C; ++j) acc += pw[C - 1 - j] * k(j)[c] * v(j)[w];
        Snew[size_t(c) * d + w] = acc;
      }
    for (int i = 0; i < d * d; ++i) h.S[i] = bf16_state ? round_bf16(float(Snew[i])) : float(Snew[i]);
  }
}

}  // namespace

void lightning_qk_ref(float* qkv, int64_t row_stride, const float* q_norm, const float* k_norm,
                      const int32_t* positions, bool rope, float rope_theta, float eps, int tokens, int heads,
                      int kv_heads, int head_dim) {
  for (int t = 0; t < tokens; ++t) {
    float* row = qkv + t * row_stride;
    for (int h = 0; h < heads + kv_heads; ++h)
      rmsnorm_rope_head(row + h * head_dim, h < heads ? q_norm : k_norm, positions[t], rope, rope_theta, eps,
                        head_dim);
  }
}

void lightning_ref(const LightningRefArgs& a) {
  const int d = a.head_dim, group = a.heads / a.kv_heads;
  const int64_t k_col = int64_t(a.heads) * d, v_col = k_col + int64_t(a.kv_heads) * d;
  for (int s = 0; s < a.batch; ++s) {
    const int t0 = a.q_offsets[s], n = a.q_offsets[s + 1] - t0;
    for (int h = 0; h < a.heads; ++h) {
      if (n <= 0) continue;  // no token: the slot is left as it is, even at start_pos 0
      float* S = a.state + (int64_t(a.seq_slots[s]) * a.heads + h) * d * d;
      if (a.start_pos[s] == 0) std::fill(S, S + int64_t(d) * d, 0.f);
      const float* row = a.qkv + int64_t(t0) * a.row_stride;
      const int kvh = h / group;
      const HeadView view{row + int64_t(h) * d, row + k_col + int64_t(kvh) * d, row + v_col + int64_t(kvh) * d,
                          a.row_stride, a.out + int64_t(t0) * a.heads * d + int64_t(h) * d,
                          int64_t(a.heads) * d, S};
      if (n == 1)
        recurrent_step(view, d, a.log_decay[h], a.scale, a.bf16_state);
      else
        chunked(view, n, d, a.chunk, a.log_decay[h], a.scale, a.bf16_state);
    }
  }
}

void output_gate_ref(const float* attn, const float* gate, int64_t gate_stride, const float* gamma, int tokens,
                     int width, float eps, float* out) {
  for (int t = 0; t < tokens; ++t) {
    const float* x = attn + int64_t(t) * width;
    double inv = 1;
    if (gamma) {
      double ss = 0;
      for (int c = 0; c < width; ++c) ss += double(x[c]) * x[c];
      inv = 1.0 / std::sqrt(ss / width + eps);
    }
    for (int c = 0; c < width; ++c) {
      double y = gamma ? x[c] * inv * gamma[c] : x[c];
      if (gate) y /= 1.0 + std::exp(-double(gate[t * gate_stride + c]));
      out[int64_t(t) * width + c] = float(y);
    }
  }
}

}  // namespace soartune::kernels
