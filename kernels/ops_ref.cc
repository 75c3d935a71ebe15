#include "kernels/ops_ref.h"

#include <cmath>

namespace soartune::kernels {

void rmsnorm_residual_ref(float* residual, const float* add, const float* gamma, int rows, int d, float eps,
                          float* out) {
  for (int i = 0; i < rows; ++i) {
    float* r = residual + int64_t(i) * d;
    double ss = 0;
    for (int c = 0; c < d; ++c) {
      if (add) r[c] += add[int64_t(i) * d + c];
      ss += double(r[c]) * r[c];
    }
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int c = 0; c < d; ++c) out[int64_t(i) * d + c] = float(r[c] * inv * gamma[c]);
  }
}

void rope_ref(float* row, int n_heads, int n_kv_heads, int hd, int pos, float theta, bool rotate) {
  if (!rotate) return;
  const int half = hd / 2;
  for (int h = 0; h < n_heads + n_kv_heads; ++h) {
    float* x = row + h * hd;
    for (int j = 0; j < half; ++j) {
      const double inv_freq = std::pow(double(theta), -2.0 * j / hd);
      const double a = pos * inv_freq;
      const double c = std::cos(a), s = std::sin(a);
      const double x1 = x[j], x2 = x[j + half];
      x[j] = float(x1 * c - x2 * s);
      x[j + half] = float(x2 * c + x1 * s);
    }
  }
}

void swiglu_ref(const float* gu, int tokens, int f, float* out) {
  for (int i = 0; i < tokens; ++i)
    for (int j = 0; j < f; ++j) {
      const double g = gu[int64_t(i) * 2 * f + j], u = gu[int64_t(i) * 2 * f + f + j];
      out[int64_t(i) * f + j] = float(g / (1.0 + std::exp(-g)) * u);
    }
}

void argmax_ref(const float* logits, int rows, int vocab, int32_t* out) {
  for (int i = 0; i < rows; ++i) {
    int best = -1;
    for (int v = 0; v < vocab; ++v) {
      const float x = logits[int64_t(i) * vocab + v];
      if (std::isnan(x)) continue;
      if (best < 0 || x > logits[int64_t(i) * vocab + best]) best = v;
    }
    out[i] = best < 0 ? 0 : best;
  }
}

}  // namespace soartune::kernels
