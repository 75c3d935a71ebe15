// The fp32 reference backend: HF Llama semantics (RMSNorm in fp32, half-split rotate_half RoPE, attention
// scale 1/sqrt(head_dim), SiLU-gated MLP), Eigen GEMMs over all tokens of a step, attention over the paged
// cache read back through kv_cache_dtype (so KV quantisation shows in the numerics exactly as stored).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <Eigen/Core>

#include "engine/backend.h"
#include "engine/system_memory.h"
#include "engine/thread_pool.h"
#include "kernels/numeric_formats.h"

namespace soartune::engine {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRow = Eigen::Map<RowMat>;
using ColMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using MapColConst = Eigen::Map<const ColMat>;

// y[T][out] (= or +=) x[T][in] * W^T, W row-major [out][in] (the same bytes as a column-major [in][out]).
// Few tokens (decode steps): one pass over W, each row dotted with every token while it sits in cache;
// Eigen's GEMM would repack all of W per call. Many tokens (prefill): Eigen's blocked GEMM.
constexpr int kSkinnyTokens = 32;

void linear(ThreadPool& pool, const float* x, int T, int in, const std::vector<float>& w, int out, float* y,
            bool accumulate) {
  // Each part owns a block of output columns; blocks are multiples of 16 so Eigen's kernels stay aligned.
  const int blocks = (out + 15) / 16;
  // Below about a million multiply-adds a thread hand-off costs more than it saves.
  const bool serial = static_cast<int64_t>(T) * in * out < (int64_t{1} << 20);
  auto body = [&](int b0, int b1, int) {
    const int o0 = b0 * 16, o1 = std::min(out, b1 * 16);
    if (T <= kSkinnyTokens) {
      for (int o = o0; o < o1; ++o) {
        Eigen::Map<const Eigen::VectorXf> wr(w.data() + static_cast<std::size_t>(o) * in, in);
        for (int t = 0; t < T; ++t) {
          const float v = wr.dot(Eigen::Map<const Eigen::VectorXf>(x + static_cast<std::size_t>(t) * in, in));
          float& dst = y[static_cast<std::size_t>(t) * out + o];
          dst = accumulate ? dst + v : v;
        }
      }
      return;
    }
    Eigen::Map<const RowMat> X(x, T, in);
    MapColConst Wt(w.data() + static_cast<std::size_t>(o0) * in, in, o1 - o0);
    Eigen::Map<RowMat, 0, Eigen::OuterStride<>> Y(y + o0, T, o1 - o0, Eigen::OuterStride<>(out));
    if (accumulate) Y.noalias() += X * Wt;
    else Y.noalias() = X * Wt;
  };
  if (serial) body(0, blocks, 0);
  else pool.parallel_for(blocks, body);
}

void rmsnorm(const float* x, const float* weight, int d, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < d; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.f / std::sqrt(static_cast<float>(ss / d) + eps);
  for (int i = 0; i < d; ++i) out[i] = weight[i] * (x[i] * inv);
}

std::vector<float> dequantized(const QuantizedLinear& l) {
  std::vector<float> w(static_cast<std::size_t>(l.out) * l.in);
  dequantize_rows(l, 0, l.out, w.data());
  return w;
}

// fp32 copies of each format's 8-bit or 16-bit code, so reading the cache is one load.
struct DecodeTables {
  std::vector<float> fp16, e4m3, e5m2;
  DecodeTables() : fp16(65536), e4m3(256), e5m2(256) {
    for (int i = 0; i < 65536; ++i) fp16[i] = kernels::fp16_to_f32(static_cast<uint16_t>(i));
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = kernels::fp8_e4m3_to_f32(static_cast<uint8_t>(i));
      e5m2[i] = kernels::fp8_e5m2_to_f32(static_cast<uint8_t>(i));
    }
  }
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads)
      : threads_(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
        pool_(threads_) {}

  std::string name() const override { return "cpu"; }
  std::string device() const override { return "cpu: " + std::to_string(threads_) + " threads"; }
  int kv_pages() const override { return num_pages_; }
  std::size_t peak_memory_bytes() const override { return peak_rss_bytes(); }

  Status prepare(const BackendPlan& plan) override {
    if (!plan.weights) return Status::Internal("cpu backend: prepare without weights");
    const ModelWeights& w = *plan.weights;
    c_ = w.config;
    if (c_.head_dim > 512) return Status::Invalid("model: head_dim " + std::to_string(c_.head_dim) + " above the cpu backend's 512");
    kv_dtype_ = plan.launch.kv_cache_dtype;
    page_size_ = plan.launch.kv_page_size;
    max_T_ = plan.max_step_tokens;
    max_R_ = plan.max_output_rows;
    max_ctx_ = plan.max_context;
    num_pages_ = plan.kv_pages > 0 ? plan.kv_pages : plan.max_sequences * ((plan.max_context + page_size_ - 1) / page_size_);
    const std::size_t kv_bytes = 2ull * c_.layers * num_pages_ * page_size_ * c_.kv_dim() * kv_dtype_bytes(kv_dtype_);
    const std::size_t need = static_cast<std::size_t>(c_.parameter_count() + (c_.tie_embeddings ? int64_t(c_.vocab) * c_.hidden : 0)) * 4 + kv_bytes;
    const std::size_t avail = available_memory_bytes();
    if (avail && need > avail * 9 / 10)
      return Status::Exhausted("cpu backend: " + c_.name + " needs " + std::to_string(need >> 20) +
                               " MiB for fp32 weights and the KV cache; " + std::to_string(avail >> 20) + " MiB available");
    Eigen::setNbThreads(1);   // parallelism comes from pool_, one column block per thread

    const int d = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), f = c_.intermediate;
    layers_.clear();
    layers_.resize(static_cast<std::size_t>(c_.layers));
    for (int i = 0; i < c_.layers; ++i) {
      const LayerWeights& src = w.layers[static_cast<std::size_t>(i)];
      Layer& l = layers_[static_cast<std::size_t>(i)];
      l.attn_norm = src.attn_norm;
      l.mlp_norm = src.mlp_norm;
      // q, k, v fused into one [qd + 2 kvd][d] matrix; gate and up into one [2f][d].
      l.wqkv.resize(static_cast<std::size_t>(qd + 2 * kvd) * d);
      dequantize_rows(src.wq, 0, qd, l.wqkv.data());
      dequantize_rows(src.wk, 0, kvd, l.wqkv.data() + static_cast<std::size_t>(qd) * d);
      dequantize_rows(src.wv, 0, kvd, l.wqkv.data() + static_cast<std::size_t>(qd + kvd) * d);
      if (!src.wq.bias.empty() || !src.wk.bias.empty() || !src.wv.bias.empty()) {
        l.bqkv.assign(static_cast<std::size_t>(qd + 2 * kvd), 0.f);
        std::copy(src.wq.bias.begin(), src.wq.bias.end(), l.bqkv.begin());
        std::copy(src.wk.bias.begin(), src.wk.bias.end(), l.bqkv.begin() + qd);
        std::copy(src.wv.bias.begin(), src.wv.bias.end(), l.bqkv.begin() + qd + kvd);
      }
      l.wo = dequantized(src.wo);
      l.wgu.resize(static_cast<std::size_t>(2 * f) * d);
      dequantize_rows(src.w_gate, 0, f, l.wgu.data());
      dequantize_rows(src.w_up, 0, f, l.wgu.data() + static_cast<std::size_t>(f) * d);
      l.wdown = dequantized(src.w_down);
      const std::size_t page_bytes = static_cast<std::size_t>(c_.kv_heads) * page_size_ * c_.head_dim * kv_dtype_bytes(kv_dtype_);
      l.k.assign(page_bytes * num_pages_, 0);
      l.v.assign(page_bytes * num_pages_, 0);
    }
    embed_ = dequantized(w.embed);
    lm_head_ = dequantized(w.lm_head);
    final_norm_ = w.final_norm;

    // RoPE tables as HF computes them: inv_freq in fp32, angle = pos * inv_freq in fp32.
    const int half = c_.head_dim / 2;
    cos_.resize(static_cast<std::size_t>(max_ctx_) * half);
    sin_.resize(cos_.size());
    for (int i = 0; i < half; ++i) {
      const float inv_freq = 1.0f / std::pow(c_.rope_theta, static_cast<float>(2 * i) / static_cast<float>(c_.head_dim));
      for (int p = 0; p < max_ctx_; ++p) {
        const float angle = static_cast<float>(p) * inv_freq;
        cos_[static_cast<std::size_t>(p) * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sin_[static_cast<std::size_t>(p) * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
    }
    const std::size_t T = static_cast<std::size_t>(max_T_);
    x_.assign(T * d, 0.f);
    xn_.assign(T * d, 0.f);
    qkv_.assign(T * (qd + 2 * kvd), 0.f);
    attn_.assign(T * qd, 0.f);
    gu_.assign(T * 2 * f, 0.f);
    act_.assign(T * f, 0.f);
    rows_.assign(static_cast<std::size_t>(std::min(max_R_, kLogitRows)) * d, 0.f);
    logits_.assign(static_cast<std::size_t>(std::min(max_R_, kLogitRows)) * c_.vocab, 0.f);
    token_seq_.assign(T, 0);
    scores_.assign(static_cast<std::size_t>(threads_) * max_ctx_, 0.f);
    return Status::Ok();
  }

  Status forward(const Step& step, StepOutput& out) override {
    const int T = static_cast<int>(step.tokens.size());
    const int R = static_cast<int>(step.output_rows.size());
    if (T == 0) return Status::Ok();
    if (T > max_T_ || R > max_R_)
      return Status::Internal("cpu backend: step of " + std::to_string(T) + " tokens / " + std::to_string(R) +
                              " outputs exceeds the prepared " + std::to_string(max_T_) + " / " + std::to_string(max_R_));
    if (static_cast<int>(out.argmax.size()) < R) return Status::Internal("cpu backend: argmax output too small");
    const int d = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), f = c_.intermediate, hd = c_.head_dim;
    const int qkv_w = qd + 2 * kvd;
    for (int si = 0; si < static_cast<int>(step.seqs.size()); ++si) {
      const StepSequence& s = step.seqs[static_cast<std::size_t>(si)];
      if (s.start_pos + s.num_tokens > max_ctx_)
        return Status::Internal("cpu backend: position beyond the prepared context " + std::to_string(max_ctx_));
      for (int t = s.first_token; t < s.first_token + s.num_tokens; ++t) token_seq_[static_cast<std::size_t>(t)] = si;
    }
    for (int t = 0; t < T; ++t) {
      const int tok = step.tokens[static_cast<std::size_t>(t)];
      if (tok < 0 || tok >= c_.vocab) return Status::Invalid("token id " + std::to_string(tok) + " outside the vocabulary");
      std::memcpy(&x_[static_cast<std::size_t>(t) * d], &embed_[static_cast<std::size_t>(tok) * d], sizeof(float) * d);
    }
    for (Layer& l : layers_) {
      for (int t = 0; t < T; ++t) rmsnorm(&x_[static_cast<std::size_t>(t) * d], l.attn_norm.data(), d, c_.rms_eps, &xn_[static_cast<std::size_t>(t) * d]);
      linear(pool_, xn_.data(), T, d, l.wqkv, qkv_w, qkv_.data(), false);
      for (int t = 0; t < T; ++t) {
        float* row = &qkv_[static_cast<std::size_t>(t) * qkv_w];
        if (!l.bqkv.empty())
          for (int i = 0; i < qkv_w; ++i) row[i] += l.bqkv[static_cast<std::size_t>(i)];
        const int pos = step.positions[static_cast<std::size_t>(t)];
        for (int h = 0; h < c_.heads + c_.kv_heads; ++h) rope(row + h * hd, pos);  // q heads then k heads
        write_kv(l, step.seqs[static_cast<std::size_t>(token_seq_[static_cast<std::size_t>(t)])], pos, row + qd, row + qd + kvd);
      }
      attention(l, step, T);
      linear(pool_, attn_.data(), T, qd, l.wo, d, x_.data(), true);
      for (int t = 0; t < T; ++t) rmsnorm(&x_[static_cast<std::size_t>(t) * d], l.mlp_norm.data(), d, c_.rms_eps, &xn_[static_cast<std::size_t>(t) * d]);
      linear(pool_, xn_.data(), T, d, l.wgu, 2 * f, gu_.data(), false);
      for (int t = 0; t < T; ++t) {
        const float* g = &gu_[static_cast<std::size_t>(t) * 2 * f];
        const float* u = g + f;
        float* a = &act_[static_cast<std::size_t>(t) * f];
        for (int i = 0; i < f; ++i) a[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
      }
      linear(pool_, act_.data(), T, f, l.wdown, d, x_.data(), true);
    }
    // Final norm and lm_head over the output rows, kLogitRows at a time (teacher forcing asks for many).
    if (!out.logits.empty() && out.logits.size() < static_cast<std::size_t>(R) * c_.vocab)
      return Status::Internal("cpu backend: logits output too small");
    for (int r0 = 0; r0 < R; r0 += kLogitRows) {
      const int rn = std::min(kLogitRows, R - r0);
      for (int r = 0; r < rn; ++r) {
        const int t = step.output_rows[static_cast<std::size_t>(r0 + r)];
        rmsnorm(&x_[static_cast<std::size_t>(t) * d], final_norm_.data(), d, c_.rms_eps, &rows_[static_cast<std::size_t>(r) * d]);
      }
      linear(pool_, rows_.data(), rn, d, lm_head_, c_.vocab, logits_.data(), false);
      for (int r = 0; r < rn; ++r) {
        const float* lg = &logits_[static_cast<std::size_t>(r) * c_.vocab];
        out.argmax[static_cast<std::size_t>(r0 + r)] = static_cast<int32_t>(std::max_element(lg, lg + c_.vocab) - lg);
      }
      if (!out.logits.empty())
        std::copy(logits_.begin(), logits_.begin() + static_cast<std::ptrdiff_t>(rn) * c_.vocab,
                  out.logits.begin() + static_cast<std::ptrdiff_t>(r0) * c_.vocab);
    }
    return Status::Ok();
  }

 private:
  struct Layer {
    std::vector<float> attn_norm, mlp_norm;   // [d]
    std::vector<float> wqkv;                  // [qd + 2 kvd][d]
    std::vector<float> bqkv;                  // [qd + 2 kvd] or empty
    std::vector<float> wo;                    // [d][qd]
    std::vector<float> wgu;                   // [2f][d]
    std::vector<float> wdown;                 // [d][f]
    std::vector<uint8_t> k, v;                // [pages][kv_heads][page_size][head_dim] in kv_dtype_
  };

  void rope(float* x, int pos) const {
    const int half = c_.head_dim / 2;
    const float* cs = &cos_[static_cast<std::size_t>(pos) * half];
    const float* sn = &sin_[static_cast<std::size_t>(pos) * half];
    for (int i = 0; i < half; ++i) {
      const float a = x[i], b = x[i + half];
      x[i] = a * cs[i] - b * sn[i];
      x[i + half] = b * cs[i] + a * sn[i];
    }
  }

  std::size_t kv_index(const StepSequence& s, int pos, int kvh) const {
    const int page = s.block_table[static_cast<std::size_t>(pos / page_size_)];
    return ((static_cast<std::size_t>(page) * c_.kv_heads + kvh) * page_size_ + pos % page_size_) * c_.head_dim;
  }

  void store(std::vector<uint8_t>& cache, std::size_t index, const float* src) const {
    const int hd = c_.head_dim;
    switch (kv_dtype_) {
      case KvDtype::kBF16: {
        auto* p = reinterpret_cast<uint16_t*>(cache.data()) + index;
        for (int i = 0; i < hd; ++i) p[i] = kernels::f32_to_bf16(src[i]);
        break;
      }
      case KvDtype::kFP16: {
        auto* p = reinterpret_cast<uint16_t*>(cache.data()) + index;
        for (int i = 0; i < hd; ++i) p[i] = kernels::f32_to_fp16(src[i]);
        break;
      }
      case KvDtype::kFP8E4M3:
        for (int i = 0; i < hd; ++i) cache[index + i] = kernels::f32_to_fp8_e4m3(src[i]);
        break;
      case KvDtype::kFP8E5M2:
        for (int i = 0; i < hd; ++i) cache[index + i] = kernels::f32_to_fp8_e5m2(src[i]);
        break;
      case KvDtype::kFP32:
        std::memcpy(reinterpret_cast<float*>(cache.data()) + index, src, sizeof(float) * hd);
        break;
    }
  }

  void load(const std::vector<uint8_t>& cache, std::size_t index, float* dst) const {
    const int hd = c_.head_dim;
    switch (kv_dtype_) {
      case KvDtype::kBF16: {
        auto* p = reinterpret_cast<const uint16_t*>(cache.data()) + index;
        for (int i = 0; i < hd; ++i) dst[i] = kernels::bf16_to_f32(p[i]);
        break;
      }
      case KvDtype::kFP16: {
        auto* p = reinterpret_cast<const uint16_t*>(cache.data()) + index;
        for (int i = 0; i < hd; ++i) dst[i] = tables_.fp16[p[i]];
        break;
      }
      case KvDtype::kFP8E4M3:
        for (int i = 0; i < hd; ++i) dst[i] = tables_.e4m3[cache[index + i]];
        break;
      case KvDtype::kFP8E5M2:
        for (int i = 0; i < hd; ++i) dst[i] = tables_.e5m2[cache[index + i]];
        break;
      case KvDtype::kFP32:
        std::memcpy(dst, reinterpret_cast<const float*>(cache.data()) + index, sizeof(float) * hd);
        break;
    }
  }

  void write_kv(Layer& l, const StepSequence& s, int pos, const float* k, const float* v) {
    for (int h = 0; h < c_.kv_heads; ++h) {
      const std::size_t idx = kv_index(s, pos, h);
      store(l.k, idx, k + h * c_.head_dim);
      store(l.v, idx, v + h * c_.head_dim);
    }
  }

  // Causal GQA attention of every token of the step over its own sequence's cached positions 0..pos.
  void attention(const Layer& l, const Step& step, int T) {
    const int hd = c_.head_dim, qkv_w = c_.q_dim() + 2 * c_.kv_dim(), H = c_.heads, group = c_.group();
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    const int work = T * H;
    pool_.parallel_for(work, [&](int w0, int w1, int tid) {
    for (int wi = w0; wi < w1; ++wi) {
      const int t = wi / H, h = wi % H, kvh = h / group;
      const StepSequence& s = step.seqs[static_cast<std::size_t>(token_seq_[static_cast<std::size_t>(t)])];
      const int pos = step.positions[static_cast<std::size_t>(t)];
      const float* q = &qkv_[static_cast<std::size_t>(t) * qkv_w + static_cast<std::size_t>(h) * hd];
      float* sc = &scores_[static_cast<std::size_t>(tid) * max_ctx_];
      float kbuf[512];
      float mx = -std::numeric_limits<float>::infinity();
      for (int j = 0; j <= pos; ++j) {
        load(l.k, kv_index(s, j, kvh), kbuf);
        float dot = 0.f;
        for (int i = 0; i < hd; ++i) dot += q[i] * kbuf[i];
        sc[j] = dot * scale;
        mx = std::max(mx, sc[j]);
      }
      float sum = 0.f;
      for (int j = 0; j <= pos; ++j) {
        sc[j] = std::exp(sc[j] - mx);
        sum += sc[j];
      }
      float* o = &attn_[static_cast<std::size_t>(t) * c_.q_dim() + static_cast<std::size_t>(h) * hd];
      std::fill(o, o + hd, 0.f);
      const float inv = 1.f / sum;
      for (int j = 0; j <= pos; ++j) {
        load(l.v, kv_index(s, j, kvh), kbuf);
        const float p = sc[j] * inv;
        for (int i = 0; i < hd; ++i) o[i] += p * kbuf[i];
      }
    }
    });
  }

  int threads_;
  ThreadPool pool_;
  ModelConfig c_;
  KvDtype kv_dtype_ = KvDtype::kBF16;
  int page_size_ = 16, max_T_ = 0, max_R_ = 0, max_ctx_ = 0, num_pages_ = 0;
  std::vector<Layer> layers_;
  std::vector<float> embed_, lm_head_, final_norm_;      // [vocab][d], [vocab][d], [d]
  std::vector<float> cos_, sin_;                         // [max_ctx][head_dim / 2]
  std::vector<float> x_, xn_;                            // [T][d] residual stream, normed
  std::vector<float> qkv_;                               // [T][qd + 2 kvd]
  std::vector<float> attn_;                              // [T][qd]
  std::vector<float> gu_, act_;                          // [T][2f], [T][f]
  static constexpr int kLogitRows = 128;
  std::vector<float> rows_, logits_;                     // [kLogitRows][d], [kLogitRows][vocab]
  std::vector<int> token_seq_;                           // [T] index into step.seqs
  std::vector<float> scores_;                            // [threads][max_ctx]
  DecodeTables tables_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace soartune::engine
