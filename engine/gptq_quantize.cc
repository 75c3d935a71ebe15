#include "engine/gptq_quantize.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include <Eigen/Dense>

#include "engine/quantize.h"

namespace soartune::engine {

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;   // [tokens][width]

// W [out][in] of a linear as fp32, as every backend computes with it.
MatF weight_f32(const QuantizedLinear& l) {
  MatF w(l.out, l.in);
  dequantize_rows(l, 0, l.out, w.data());
  return w;
}

// y = x W^T (+ bias) through the solver's forward.
Status linear(GptqSolver& solver, const MatF& x, const QuantizedLinear& l, MatF* y) {
  y->resize(x.rows(), l.out);
  return solver.forward(x.data(), static_cast<int>(x.rows()), l, y->data());
}

MatF rms_norm(const MatF& x, const std::vector<float>& g, float eps) {
  MatF y(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const float inv = 1.f / std::sqrt(x.row(t).squaredNorm() / static_cast<float>(x.cols()) + eps);
    for (Eigen::Index i = 0; i < x.cols(); ++i) y(t, i) = x(t, i) * inv * g[static_cast<std::size_t>(i)];
  }
  return y;
}

// HF rotate_half RoPE over every head of x [tokens][heads * hd].
void rope(MatF& x, const std::vector<int>& pos, int hd, float theta) {
  const int heads = static_cast<int>(x.cols()) / hd, half = hd / 2;
  for (Eigen::Index t = 0; t < x.rows(); ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        const double a = pos[static_cast<std::size_t>(t)] * std::pow(static_cast<double>(theta), -2.0 * i / hd);
        const float c = static_cast<float>(std::cos(a)), s = static_cast<float>(std::sin(a));
        float& x1 = x(t, h * hd + i);
        float& x2 = x(t, h * hd + half + i);
        const float a1 = x1, a2 = x2;
        x1 = a1 * c - a2 * s;
        x2 = a2 * c + a1 * s;
      }
}

// Causal GQA softmax attention within each sequence [begin, end) of the stacked tokens.
MatF attention(const MatF& q, const MatF& k, const MatF& v, const ModelConfig& c, const std::vector<std::pair<int, int>>& seqs) {
  MatF out = MatF::Zero(q.rows(), q.cols());
  const int hd = c.head_dim, group = c.group();
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (const auto& [b, e] : seqs) {
    const int len = e - b;
    for (int h = 0; h < c.heads; ++h) {
      const int kh = h / group;
      MatF s = (q.block(b, h * hd, len, hd) * k.block(b, kh * hd, len, hd).transpose()) * scale;   // [len][len]
      for (int t = 0; t < len; ++t) {
        s.row(t).tail(len - t - 1).setConstant(-INFINITY);
        const float m = s.row(t).head(t + 1).maxCoeff();
        s.row(t) = (s.row(t).array() - m).exp();
        s.row(t) /= s.row(t).sum();
      }
      out.block(b, h * hd, len, hd) = s * v.block(b, kh * hd, len, hd);
    }
  }
  return out;
}

// H = 2 X^T X / n: accumulated in fp32 (a symmetric rank-n update, half a GEMM) as the reference
// implementation does, handed on in fp64 for the Cholesky factorisations.
std::vector<double> hessian(const Eigen::Map<const MatF>& x) {
  Eigen::MatrixXf h = Eigen::MatrixXf::Zero(x.cols(), x.cols());
  h.selfadjointView<Eigen::Lower>().rankUpdate(x.transpose(), 2.f / static_cast<float>(x.rows()));
  const Eigen::MatrixXd full = h.selfadjointView<Eigen::Lower>().toDenseMatrix().cast<double>();
  return std::vector<double>(full.data(), full.data() + full.size());   // symmetric: storage order does not matter
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The reference: H in fp32 by Eigen, then each linear by gptq_quantize_linear (fp64).
class CpuGptqSolver final : public GptqSolver {
 public:
  std::string name() const override { return "cpu"; }
  Status quantize_group(const float* x, int tokens, int in, std::span<const GptqLinear> linears, int group_size,
                        const GptqOptions& options) override {
    if (linears.empty()) return Status::Ok();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<double> h = hessian(Eigen::Map<const MatF>(x, tokens, in));
    seconds_.hessian += seconds_since(t0);
    ++seconds_.hessians;
    for (const GptqLinear& l : linears)
      if (Status s = gptq_quantize_linear(*l.linear, l.bits, group_size, h, options, &seconds_); !s.ok()) return s;
    return Status::Ok();
  }
};

Status quantize_group(GptqSolver& solver, const std::string& where, const MatF& x,
                      std::initializer_list<std::pair<QuantizedLinear*, int>> linears, int group_size, const GptqOptions& options) {
  // A NaN passes the Cholesky factorisations' pivot tests (no comparison with it is true) and would come out as
  // codes: refuse it here, for every solver.
  if (!x.allFinite())
    return Status::Invalid("calibration: the activations into " + where +
                           " are not finite (NaN or inf): the model's weights or the calibration tokens overflow fp32");
  std::vector<GptqLinear> todo;
  for (const auto& [l, bits] : linears) {
    if (bits == 16 || l->out == 0) continue;
    if (Status s = check_quantizable(*l, bits, group_size); !s.ok()) return s;
    todo.push_back({l, bits});
  }
  if (todo.empty()) return Status::Ok();
  return solver.quantize_group(x.data(), static_cast<int>(x.rows()), static_cast<int>(x.cols()), todo, group_size, options);
}

}  // namespace

std::unique_ptr<GptqSolver> make_cpu_gptq_solver() { return std::make_unique<CpuGptqSolver>(); }

Status GptqSolver::forward(const float* x, int tokens, const QuantizedLinear& l, float* y) {
  const auto t0 = std::chrono::steady_clock::now();
  Eigen::Map<MatF> out(y, tokens, l.out);
  out.noalias() = Eigen::Map<const MatF>(x, tokens, l.in) * weight_f32(l).transpose();
  if (!l.bias.empty())
    for (int o = 0; o < l.out; ++o) out.col(o).array() += l.bias[static_cast<std::size_t>(o)];
  seconds_.forward += seconds_since(t0);
  ++seconds_.forwards;
  return Status::Ok();
}

Status gptq_quantize_linear(QuantizedLinear& l, int bits, int group_size, std::vector<double> hessian_in, const GptqOptions& options,
                            GptqStageSeconds* seconds) {
  if (bits == 16) return Status::Ok();
  if (Status s = check_quantizable(l, bits, group_size); !s.ok()) return s;
  if (hessian_in.size() != static_cast<std::size_t>(l.in) * l.in)
    return Status::Invalid("gptq: a Hessian of " + std::to_string(hessian_in.size()) + " entries for a linear with " +
                           std::to_string(l.in) + " inputs (it takes in x in)");
  const int n = l.in, rows = l.out, qmax = (1 << (bits - 1)) - 1;
  const int gsize = group_size == 0 ? n : group_size, groups = n / gsize;
  Eigen::Map<Eigen::MatrixXd> h(hessian_in.data(), n, n);
  Eigen::MatrixXd w(rows, n);   // column-major [out][in]: the sweep reads and updates whole columns
  {
    const MatF wf = weight_f32(l);
    w = wf.cast<double>();
  }
  // Inputs that never fire carry no information: their weights are zeroed (as the reference implementation does).
  for (int i = 0; i < n; ++i)
    if (h(i, i) == 0) {
      h(i, i) = 1;
      w.col(i).setZero();
    }
  // Static groups: every group's scale from the weights as they are, before any compensation (GPTQModel's
  // static_groups); measured on tiny-llama-bpe4k, sweeping in act order on top of them did not help, so the
  // sweep goes in input order and the checkpoint's g_idx is i / group_size (desc_act false).
  l.scales.assign(static_cast<std::size_t>(rows) * groups, 1.f);
  for (int o = 0; o < rows; ++o)
    for (int g = 0; g < groups; ++g)
      l.scales[static_cast<std::size_t>(o) * groups + g] =
          quant_scale(static_cast<float>(w.row(o).segment(g * gsize, gsize).cwiseAbs().maxCoeff()), bits);
  auto t_stage = std::chrono::steady_clock::now();
  const double damp = options.damp_pct / 100.0 * h.diagonal().mean();
  h.diagonal().array() += damp;
  Eigen::LLT<Eigen::MatrixXd> llt(h);
  if (llt.info() != Eigen::Success)
    return Status::Invalid("gptq: the damped Hessian of a " + std::to_string(rows) + " x " + std::to_string(n) +
                           " linear is not positive definite; raise calibration.damp_pct");
  const Eigen::MatrixXd hinv = llt.solve(Eigen::MatrixXd::Identity(n, n));
  Eigen::LLT<Eigen::MatrixXd> llt_inv(hinv);
  if (llt_inv.info() != Eigen::Success) return Status::Internal("gptq: the inverse Hessian has no Cholesky factor");
  const Eigen::MatrixXd u = llt_inv.matrixU();   // hinv = U^T U; row j of U holds the update weights of column j
  if (seconds) seconds->cholesky += seconds_since(t_stage);
  t_stage = std::chrono::steady_clock::now();

  l.q.assign(static_cast<std::size_t>(rows) * n, 0);
  const int block = std::max(1, options.block);
  for (int j1 = 0; j1 < n; j1 += block) {
    const int count = std::min(block, n - j1);
    Eigen::MatrixXd err(rows, count);
    for (int i = 0; i < count; ++i) {
      const int j = j1 + i, col = j, g = col / gsize;
      const double d = u(j, j);
      for (int o = 0; o < rows; ++o) {
        const float scale = l.scales[static_cast<std::size_t>(o) * groups + g];
        const float wv = static_cast<float>(w(o, j));
        const float q = std::clamp(std::nearbyint(wv / scale), static_cast<float>(-qmax), static_cast<float>(qmax));
        l.q[static_cast<std::size_t>(o) * n + col] = static_cast<int8_t>(q);
        err(o, i) = (w(o, j) - static_cast<double>(q * scale)) / d;
      }
      // Spread this column's error over the block's later columns ...
      if (i + 1 < count) w.middleCols(j + 1, count - i - 1).noalias() -= err.col(i) * u.row(j).segment(j + 1, count - i - 1);
    }
    // ... and, at once, over every column after the block.
    if (j1 + count < n) w.rightCols(n - j1 - count).noalias() -= err * u.block(j1, j1 + count, count, n - j1 - count);
  }
  if (seconds) {
    seconds->columns += seconds_since(t_stage);
    ++seconds->linears;
  }
  l.bits = bits;
  l.group_size = group_size;
  l.w16.clear();
  l.w16.shrink_to_fit();
  return Status::Ok();
}

Status gptq_quantize_model(ModelWeights& w, const LaunchConfig& launch, const std::vector<std::vector<int32_t>>& calibration,
                           const GptqOptions& options, GptqSolver* solver_in) {
  const ModelConfig& c = w.config;
  if (c.has_lightning() || c.attn_output_gate || !c.attn_use_rope || c.embed_scale != 1.f || c.residual_scale != 1.f ||
      c.logit_divisor != 1.f)
    return Status::Invalid("launch.quant_method: gptq is implemented for Llama-family models; allowed for " + c.name + ": rtn");
  const int n = static_cast<int>(w.layers.size());
  if (Status s = launch.check_layers(n); !s.ok()) return s;
  if (calibration.empty()) return Status::Invalid("calibration: no calibration sequences for quant_method gptq");
  // The calibration tokens, stacked: [tokens][hidden].
  std::vector<std::pair<int, int>> seqs;
  std::vector<int> pos;
  std::vector<int32_t> ids;
  for (const auto& s : calibration) {
    seqs.push_back({static_cast<int>(ids.size()), static_cast<int>(ids.size() + s.size())});
    for (std::size_t t = 0; t < s.size(); ++t) {
      if (s[t] < 0 || s[t] >= c.vocab) return Status::Invalid("calibration: token " + std::to_string(s[t]) + " is outside the vocabulary");
      ids.push_back(s[t]);
      pos.push_back(static_cast<int>(t));
    }
  }
  if (ids.empty()) return Status::Invalid("calibration: the calibration sequences hold no tokens");
  MatF h(static_cast<Eigen::Index>(ids.size()), c.hidden);
  {
    std::vector<float> row(static_cast<std::size_t>(c.hidden));
    for (std::size_t t = 0; t < ids.size(); ++t) {
      dequantize_rows(w.embed, ids[t], 1, row.data());
      for (int i = 0; i < c.hidden; ++i) h(static_cast<Eigen::Index>(t), i) = row[static_cast<std::size_t>(i)];
    }
  }
  std::unique_ptr<GptqSolver> cpu;
  if (!solver_in) cpu = make_cpu_gptq_solver();
  GptqSolver& solver = solver_in ? *solver_in : *cpu;
  const int g = launch.weight_group_size;
  for (int i = 0; i < n; ++i) {
    LayerWeights& l = w.layers[static_cast<std::size_t>(i)];
    const int ab = launch.weight_bits_for(i, n, ProjKind::kAttn), mb = launch.weight_bits_for(i, n, ProjKind::kMlp);
    const std::string at = "layer " + std::to_string(i);
    const MatF xa = rms_norm(h, l.attn_norm, c.rms_eps);
    if (Status s = quantize_group(solver, at + " q/k/v", xa, {{&l.wq, ab}, {&l.wk, ab}, {&l.wv, ab}}, g, options); !s.ok()) return s;
    MatF q, k, v, o, gate, up, down;
    for (auto [y, lin] : {std::pair{&q, &l.wq}, {&k, &l.wk}, {&v, &l.wv}})
      if (Status s = linear(solver, xa, *lin, y); !s.ok()) return s;
    rope(q, pos, c.head_dim, c.rope_theta);
    rope(k, pos, c.head_dim, c.rope_theta);
    const MatF ao = attention(q, k, v, c, seqs);
    if (Status s = quantize_group(solver, at + " o_proj", ao, {{&l.wo, ab}}, g, options); !s.ok()) return s;
    if (Status s = linear(solver, ao, l.wo, &o); !s.ok()) return s;
    h += o;
    const MatF xm = rms_norm(h, l.mlp_norm, c.rms_eps);
    if (Status s = quantize_group(solver, at + " gate/up", xm, {{&l.w_gate, mb}, {&l.w_up, mb}}, g, options); !s.ok()) return s;
    for (auto [y, lin] : {std::pair{&gate, &l.w_gate}, {&up, &l.w_up}})
      if (Status s = linear(solver, xm, *lin, y); !s.ok()) return s;
    MatF act(gate.rows(), gate.cols());
    act.array() = gate.array() / (1.f + (-gate.array()).exp()) * up.array();
    if (Status s = quantize_group(solver, at + " down_proj", act, {{&l.w_down, mb}}, g, options); !s.ok()) return s;
    if (Status s = linear(solver, act, l.w_down, &down); !s.ok()) return s;
    h += down;
  }
  if (launch.lm_head_bits < 16) {
    const MatF xf = rms_norm(h, w.final_norm, c.rms_eps);
    if (Status s = quantize_group(solver, "the lm_head", xf, {{&w.lm_head, launch.lm_head_bits}}, g, options); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace soartune::engine
