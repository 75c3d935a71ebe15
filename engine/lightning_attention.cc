#include "engine/lightning_attention.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "kernels/numeric_formats.h"

namespace soartune::engine {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
using StridedConst = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;

void round_to_bf16(float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = kernels::bf16_to_f32(kernels::f32_to_bf16(x[i]));
}

void recurrent_step(const LightningHeadArgs& a) {
  const int d = a.dim;
  const float decay = std::exp(a.log_decay);
  Eigen::Map<RowMat> S(a.state, d, d);
  Eigen::Map<const Eigen::RowVectorXf> q(a.q, d), k(a.k, d), v(a.v, d);
  Eigen::Map<Eigen::RowVectorXf> o(a.out, d);
  S *= decay;
  S.noalias() += k.transpose() * v;
  // The output reads the state before it is stored: the GPU kernel keeps it in fp32 registers for o_t.
  o.noalias() = a.scale * (q * S);
  if (a.bf16_state) round_to_bf16(a.state, d * d);
}

}  // namespace

void lightning_head(const LightningHeadArgs& a, int chunk, float* scratch) {
  if (a.n <= 0) return;
  if (a.n == 1) {
    recurrent_step(a);
    return;
  }
  const int d = a.dim;
  const float g = a.log_decay;
  float* A_buf = scratch;                                  // [C][C] decayed, masked scores
  float* QE_buf = A_buf + chunk * chunk;                   // [C][d] scale * exp(i g) q_i
  float* KW_buf = QE_buf + chunk * d;                      // [C][d] exp((C-j) g) k_j
  float* pow_buf = KW_buf + chunk * d;                     // [C+1] exp(m g), m = 0..C
  for (int m = 0; m <= chunk; ++m) pow_buf[m] = std::exp(g * static_cast<float>(m));
  Eigen::Map<RowMat> S(a.state, d, d);
  for (int c0 = 0; c0 < a.n; c0 += chunk) {
    const int C = std::min(chunk, a.n - c0);
    StridedConst Q(a.q + static_cast<std::ptrdiff_t>(c0) * a.q_stride, C, d, Eigen::OuterStride<>(a.q_stride));
    StridedConst K(a.k + static_cast<std::ptrdiff_t>(c0) * a.k_stride, C, d, Eigen::OuterStride<>(a.k_stride));
    StridedConst V(a.v + static_cast<std::ptrdiff_t>(c0) * a.v_stride, C, d, Eigen::OuterStride<>(a.v_stride));
    Strided O(a.out + static_cast<std::ptrdiff_t>(c0) * a.out_stride, C, d, Eigen::OuterStride<>(a.out_stride));
    Eigen::Map<RowMat> A(A_buf, C, C), QE(QE_buf, C, d), KW(KW_buf, C, d);
    // Intra-chunk: A[i][j] = scale exp((i-j) g) (q_i . k_j) for j <= i, 0 above the diagonal.
    A.noalias() = Q * K.transpose();
    for (int i = 0; i < C; ++i) {
      float* row = A_buf + static_cast<std::ptrdiff_t>(i) * C;
      for (int j = 0; j <= i; ++j) row[j] *= a.scale * pow_buf[i - j];
      std::fill(row + i + 1, row + C, 0.f);
    }
    // Inter-chunk: token i (local index i + 1) reads the state decayed i + 1 times.
    for (int i = 0; i < C; ++i) QE.row(i) = (a.scale * pow_buf[i + 1]) * Q.row(i);
    O.noalias() = QE * S;
    O.noalias() += A * V;
    // State after the chunk: k_j (local index j + 1) decays C - j - 1 more times.
    for (int j = 0; j < C; ++j) KW.row(j) = pow_buf[C - 1 - j] * K.row(j);
    S *= pow_buf[C];
    S.noalias() += KW.transpose() * V;
    if (a.bf16_state) round_to_bf16(a.state, d * d);
  }
}

}  // namespace soartune::engine
