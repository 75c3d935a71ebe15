// The fp32 reference backend: HF Llama semantics (RMSNorm in fp32, half-split rotate_half RoPE, attention
// scale 1/sqrt(head_dim), SiLU-gated MLP), Eigen GEMMs over all tokens of a step, attention over the paged
// cache read back through kv_cache_dtype (so KV quantisation shows in the numerics exactly as stored).
// MiniCPM-SALA on the same path: per-layer mixers (softmax layers with optional NoPE and output gate;
// lightning layers with q/k norm, RoPE, the chunked / recurrent Simple GLA of lightning_attention.h over a
// per-slot state, output norm and gate) and the muP scalings (embedding, residual branches, logits). The launch
// config's lightning_chunk, lightning_state_dtype (fp32, or bf16 rounding after each update) and sparse
// attention knobs (on/off, top-k, window over the model's sparse_config) apply here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <Eigen/Core>

#include "engine/backend.h"
#include "engine/lightning_attention.h"
#include "engine/sparse_attention.h"
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
    const std::size_t kv_bytes = 2ull * c_.softmax_layers() * num_pages_ * page_size_ * c_.kv_dim() * kv_cache_dtype_bytes(kv_dtype_);
    const std::size_t state_bytes = 4ull * (c_.layers - c_.softmax_layers()) * plan.max_sequences * c_.lightning_state_elems();
    const std::size_t need = static_cast<std::size_t>(c_.parameter_count() + (c_.tie_embeddings ? int64_t(c_.vocab) * c_.hidden : 0)) * 4 +
                             kv_bytes + state_bytes;
    const std::size_t avail = available_memory_bytes();
    if (avail && need > avail * 9 / 10)
      return Status::Exhausted("cpu backend: " + c_.name + " needs " + std::to_string(need >> 20) +
                               " MiB for fp32 weights, the KV cache and the lightning states; " + std::to_string(avail >> 20) + " MiB available");
    Eigen::setNbThreads(1);   // parallelism comes from pool_, one column block per thread

    const int d = c_.hidden, f = c_.intermediate;
    const float r = c_.residual_scale;
    layers_.clear();
    layers_.resize(static_cast<std::size_t>(c_.layers));
    max_qd_ = max_row_ = 0;
    int lightning_layers = 0;
    for (int i = 0; i < c_.layers; ++i) {
      const LayerWeights& src = w.layers[static_cast<std::size_t>(i)];
      Layer& l = layers_[static_cast<std::size_t>(i)];
      l.kind = c_.mixer(i);
      l.qd = c_.layer_q_dim(i);
      l.kvd = c_.layer_kv_dim(i);
      const int qd = l.qd, kvd = l.kvd;
      l.has_gate = src.w_out_gate.out > 0;
      l.row = qd + 2 * kvd + (l.has_gate ? qd : 0);
      max_qd_ = std::max(max_qd_, qd);
      max_row_ = std::max(max_row_, l.row);
      l.attn_norm = src.attn_norm;
      l.mlp_norm = src.mlp_norm;
      l.q_norm = src.q_norm;
      l.k_norm = src.k_norm;
      l.o_norm = src.o_norm;
      // q, k, v (and the output gate) fused into one [row][d] matrix; gate and up into one [2f][d].
      l.wqkv.resize(static_cast<std::size_t>(l.row) * d);
      dequantize_rows(src.wq, 0, qd, l.wqkv.data());
      dequantize_rows(src.wk, 0, kvd, l.wqkv.data() + static_cast<std::size_t>(qd) * d);
      dequantize_rows(src.wv, 0, kvd, l.wqkv.data() + static_cast<std::size_t>(qd + kvd) * d);
      if (l.has_gate) dequantize_rows(src.w_out_gate, 0, qd, l.wqkv.data() + static_cast<std::size_t>(qd + 2 * kvd) * d);
      if (!src.wq.bias.empty() || !src.wk.bias.empty() || !src.wv.bias.empty()) {
        l.bqkv.assign(static_cast<std::size_t>(l.row), 0.f);
        std::copy(src.wq.bias.begin(), src.wq.bias.end(), l.bqkv.begin());
        std::copy(src.wk.bias.begin(), src.wk.bias.end(), l.bqkv.begin() + qd);
        std::copy(src.wv.bias.begin(), src.wv.bias.end(), l.bqkv.begin() + qd + kvd);
      }
      // The residual scale (muP scale_depth / sqrt(layers); 1 for Llama) is folded into the two projections
      // that write the residual stream, so each branch still lands with one accumulating GEMM.
      l.wo = dequantized(src.wo);
      l.wgu.resize(static_cast<std::size_t>(2 * f) * d);
      dequantize_rows(src.w_gate, 0, f, l.wgu.data());
      dequantize_rows(src.w_up, 0, f, l.wgu.data() + static_cast<std::size_t>(f) * d);
      l.wdown = dequantized(src.w_down);
      if (r != 1.f) {
        for (float& x : l.wo) x *= r;
        for (float& x : l.wdown) x *= r;
      }
      if (l.kind == MixerKind::kSoftmax) {
        const std::size_t page_bytes = static_cast<std::size_t>(c_.kv_heads) * page_size_ * c_.head_dim * kv_cache_dtype_bytes(kv_dtype_);
        l.k.assign(page_bytes * num_pages_, 0);
        l.v.assign(page_bytes * num_pages_, 0);
      } else {
        l.state_index = lightning_layers++;
      }
    }
    // Lightning: one fp32 state per (layer, slot), and the per-head log-decays -alibi_slopes (fp32, as HF
    // builds them from Python floats).
    max_slots_ = plan.max_sequences;
    state_.assign(static_cast<std::size_t>(lightning_layers) * max_slots_ * c_.lightning_state_elems(), 0.f);
    log_decay_.clear();
    for (double sl : alibi_slopes(c_.lightning_heads)) log_decay_.push_back(-static_cast<float>(sl));
    lightning_chunk_ = plan.launch.lightning_chunk;
    if (lightning_chunk_ <= 0) return Status::Invalid("launch.lightning_chunk: " + std::to_string(lightning_chunk_) + " is not a positive chunk");
    bf16_state_ = plan.launch.lightning_state_dtype == StateDtype::kBF16;
    lightning_scratch_.assign(static_cast<std::size_t>(threads_) * lightning_scratch_floats(lightning_chunk_, std::max(1, c_.lightning_head_dim)), 0.f);
    embed_ = dequantized(w.embed);
    lm_head_ = dequantized(w.lm_head);
    final_norm_ = w.final_norm;

    // RoPE tables as HF computes them: inv_freq in fp32, angle = pos * inv_freq in fp32. One width serves
    // every layer that rotates (the loader refuses softmax and lightning layers of different rotated widths).
    const bool softmax_rope = c_.attn_use_rope && c_.softmax_layers() > 0;
    rope_dim_ = softmax_rope ? c_.head_dim : c_.lightning_use_rope && c_.has_lightning() ? c_.lightning_head_dim : 0;
    const int half = rope_dim_ / 2;
    cos_.resize(static_cast<std::size_t>(max_ctx_) * half);
    sin_.resize(cos_.size());
    for (int i = 0; i < half; ++i) {
      const float inv_freq = 1.0f / std::pow(c_.rope_theta, static_cast<float>(2 * i) / static_cast<float>(rope_dim_));
      for (int p = 0; p < max_ctx_; ++p) {
        const float angle = static_cast<float>(p) * inv_freq;
        cos_[static_cast<std::size_t>(p) * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sin_[static_cast<std::size_t>(p) * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
    }
    const std::size_t T = static_cast<std::size_t>(max_T_);
    x_.assign(T * d, 0.f);
    xn_.assign(T * d, 0.f);
    qkv_.assign(T * max_row_, 0.f);
    attn_.assign(T * max_qd_, 0.f);
    gu_.assign(T * 2 * f, 0.f);
    act_.assign(T * f, 0.f);
    rows_.assign(static_cast<std::size_t>(std::min(max_R_, kLogitRows)) * d, 0.f);
    logits_.assign(static_cast<std::size_t>(std::min(max_R_, kLogitRows)) * c_.vocab, 0.f);
    token_seq_.assign(T, 0);
    scores_.assign(static_cast<std::size_t>(threads_) * max_ctx_, 0.f);
    // InfLLM-v2: per thread, the compressed keys of one sequence, the selection's scratch and block list.
    // The launch knobs over the model's sparse_config: off (dense at every length), top-k, local window.
    auto launch_sparse = sparse_config_for_launch(c_.sparse, plan.launch.sparse_topk, plan.launch.sparse_window);
    if (!launch_sparse.ok()) return launch_sparse.status();
    sparse_cfg_ = launch_sparse.value();
    sparse_ = plan.launch.sparse_attention && sparse_cfg_.present && c_.softmax_layers() > 0 && max_ctx_ >= sparse_cfg_.dense_len;
    const SparseAttentionConfig& sp = sparse_cfg_;
    ck_stride_ = sparse_ ? (sparse_compressed_keys(max_ctx_, sp) + 1) * c_.head_dim : 0;
    sparse_scratch_stride_ = sparse_ ? sparse_scratch_floats(max_ctx_, sp) : 0;
    blocks_stride_ = sparse_ ? sparse_max_blocks(max_ctx_, sp.block_size) : 0;
    ck_.assign(static_cast<std::size_t>(threads_) * ck_stride_, 0.f);
    sparse_scratch_.assign(static_cast<std::size_t>(threads_) * sparse_scratch_stride_, 0.f);
    blocks_.assign(static_cast<std::size_t>(threads_) * blocks_stride_, 0);
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
    const int d = c_.hidden, f = c_.intermediate;
    const std::size_t stream = static_cast<std::size_t>(T) * d;
    if (!out.residual_stream.empty() && out.residual_stream.size() < (c_.layers + 1) * stream)
      return Status::Internal("cpu backend: residual_stream output too small");
    for (int si = 0; si < static_cast<int>(step.seqs.size()); ++si) {
      const StepSequence& s = step.seqs[static_cast<std::size_t>(si)];
      if (s.start_pos + s.num_tokens > max_ctx_)
        return Status::Internal("cpu backend: position beyond the prepared context " + std::to_string(max_ctx_));
      if (!state_.empty() && (s.slot < 0 || s.slot >= max_slots_))   // the slot indexes the lightning states
        return Status::Internal("cpu backend: sequence slot " + std::to_string(s.slot) + " out of range");
      for (int t = s.first_token; t < s.first_token + s.num_tokens; ++t) token_seq_[static_cast<std::size_t>(t)] = si;
    }
    for (int t = 0; t < T; ++t) {
      const int tok = step.tokens[static_cast<std::size_t>(t)];
      if (tok < 0 || tok >= c_.vocab) return Status::Invalid("token id " + std::to_string(tok) + " outside the vocabulary");
      const float* e = &embed_[static_cast<std::size_t>(tok) * d];
      float* x = &x_[static_cast<std::size_t>(t) * d];
      for (int i = 0; i < d; ++i) x[i] = e[i] * c_.embed_scale;
    }
    if (!out.residual_stream.empty()) std::copy(x_.begin(), x_.begin() + static_cast<std::ptrdiff_t>(stream), out.residual_stream.begin());
    for (std::size_t li = 0; li < layers_.size(); ++li) {
      Layer& l = layers_[li];
      for (int t = 0; t < T; ++t) rmsnorm(&x_[static_cast<std::size_t>(t) * d], l.attn_norm.data(), d, c_.rms_eps, &xn_[static_cast<std::size_t>(t) * d]);
      linear(pool_, xn_.data(), T, d, l.wqkv, l.row, qkv_.data(), false);
      if (l.kind == MixerKind::kSoftmax) softmax_mixer(l, step, T);
      else lightning_mixer(l, step, T);
      if (l.has_gate) {
        // attn *= sigmoid(gate), the gate's rows sitting after q, k and v in the fused projection.
        for (int t = 0; t < T; ++t) {
          const float* g = &qkv_[static_cast<std::size_t>(t) * l.row + l.qd + 2 * l.kvd];
          float* o = &attn_[static_cast<std::size_t>(t) * l.qd];
          for (int i = 0; i < l.qd; ++i) o[i] *= 1.f / (1.f + std::exp(-g[i]));
        }
      }
      linear(pool_, attn_.data(), T, l.qd, l.wo, d, x_.data(), true);
      for (int t = 0; t < T; ++t) rmsnorm(&x_[static_cast<std::size_t>(t) * d], l.mlp_norm.data(), d, c_.rms_eps, &xn_[static_cast<std::size_t>(t) * d]);
      linear(pool_, xn_.data(), T, d, l.wgu, 2 * f, gu_.data(), false);
      for (int t = 0; t < T; ++t) {
        const float* g = &gu_[static_cast<std::size_t>(t) * 2 * f];
        const float* u = g + f;
        float* a = &act_[static_cast<std::size_t>(t) * f];
        for (int i = 0; i < f; ++i) a[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
      }
      linear(pool_, act_.data(), T, f, l.wdown, d, x_.data(), true);
      if (!out.residual_stream.empty())
        std::copy(x_.begin(), x_.begin() + static_cast<std::ptrdiff_t>(stream),
                  out.residual_stream.begin() + static_cast<std::ptrdiff_t>((li + 1) * stream));
    }
    // Final norm and lm_head over the output rows, kLogitRows at a time (teacher forcing asks for many).
    if (!out.logits.empty() && out.logits.size() < static_cast<std::size_t>(R) * c_.vocab)
      return Status::Internal("cpu backend: logits output too small");
    for (int r0 = 0; r0 < R; r0 += kLogitRows) {
      const int rn = std::min(kLogitRows, R - r0);
      for (int r = 0; r < rn; ++r) {
        const int t = step.output_rows[static_cast<std::size_t>(r0 + r)];
        float* row = &rows_[static_cast<std::size_t>(r) * d];
        rmsnorm(&x_[static_cast<std::size_t>(t) * d], final_norm_.data(), d, c_.rms_eps, row);
        if (c_.logit_divisor != 1.f)
          for (int i = 0; i < d; ++i) row[i] /= c_.logit_divisor;
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
    MixerKind kind = MixerKind::kSoftmax;
    int qd = 0, kvd = 0;                      // this layer's q (= attention output) and k/v widths
    int row = 0;                              // fused projection width: qd + 2 kvd (+ qd with the output gate)
    bool has_gate = false;                    // output gate rows at the end of wqkv
    std::vector<float> attn_norm, mlp_norm;   // [d]
    std::vector<float> wqkv;                  // [row][d]: q | k | v | output gate
    std::vector<float> bqkv;                  // [row] or empty
    std::vector<float> wo;                    // [d][qd], times residual_scale
    std::vector<float> wgu;                   // [2f][d]
    std::vector<float> wdown;                 // [d][f], times residual_scale
    std::vector<float> q_norm, k_norm;        // [lightning_head_dim] or empty
    std::vector<float> o_norm;                // [qd] or empty
    std::vector<uint8_t> k, v;                // softmax: [pages][kv_heads][page_size][head_dim] in kv_dtype_
    int state_index = -1;                     // lightning: index of its states in state_
  };

  // Softmax layer: RoPE unless NoPE, K/V into the cache, causal GQA attention into attn_.
  void softmax_mixer(Layer& l, const Step& step, int T) {
    const int hd = c_.head_dim;
    for (int t = 0; t < T; ++t) {
      float* row = &qkv_[static_cast<std::size_t>(t) * l.row];
      if (!l.bqkv.empty())
        for (int i = 0; i < l.row; ++i) row[i] += l.bqkv[static_cast<std::size_t>(i)];
      const int pos = step.positions[static_cast<std::size_t>(t)];
      if (c_.attn_use_rope)
        for (int h = 0; h < c_.heads + c_.kv_heads; ++h) rope(row + h * hd, pos);  // q heads then k heads
      write_kv(l, step.seqs[static_cast<std::size_t>(token_seq_[static_cast<std::size_t>(t)])], pos, row + l.qd, row + l.qd + l.kvd);
    }
    attention(l, step, T);
  }

  // Lightning layer: per-head q/k RMSNorm, RoPE, Simple GLA over each sequence's state slot, output norm.
  void lightning_mixer(Layer& l, const Step& step, int T) {
    const int hd = c_.lightning_head_dim, H = c_.lightning_heads, Hkv = c_.lightning_kv_heads;
    for (int t = 0; t < T; ++t) {
      float* row = &qkv_[static_cast<std::size_t>(t) * l.row];
      const int pos = step.positions[static_cast<std::size_t>(t)];
      for (int h = 0; h < H + Hkv; ++h) {     // q heads then k heads
        float* x = row + h * hd;
        if (!l.q_norm.empty()) rmsnorm(x, (h < H ? l.q_norm : l.k_norm).data(), hd, c_.rms_eps, x);
        if (c_.lightning_use_rope) rope(x, pos);
      }
    }
    const std::size_t per_slot = static_cast<std::size_t>(c_.lightning_state_elems());
    float* states = state_.data() + static_cast<std::size_t>(l.state_index) * max_slots_ * per_slot;
    for (const StepSequence& s : step.seqs)
      if (s.start_pos == 0) std::fill_n(states + static_cast<std::size_t>(s.slot) * per_slot, per_slot, 0.f);
    // Heads of all sequences are independent: one work item per (sequence, head).
    const int nseq = static_cast<int>(step.seqs.size()), group = H / Hkv;
    const int scratch = lightning_scratch_floats(lightning_chunk_, hd);
    pool_.parallel_for(nseq * H, [&](int w0, int w1, int tid) {
      for (int wi = w0; wi < w1; ++wi) {
        const StepSequence& s = step.seqs[static_cast<std::size_t>(wi / H)];
        const int h = wi % H, kvh = h / group;
        const float* base = &qkv_[static_cast<std::size_t>(s.first_token) * l.row];
        LightningHeadArgs a;
        a.q = base + h * hd;
        a.k = base + l.qd + kvh * hd;
        a.v = base + l.qd + l.kvd + kvh * hd;
        a.q_stride = a.k_stride = a.v_stride = l.row;
        a.out = &attn_[static_cast<std::size_t>(s.first_token) * l.qd + static_cast<std::size_t>(h) * hd];
        a.out_stride = l.qd;
        a.state = states + static_cast<std::size_t>(s.slot) * per_slot + static_cast<std::size_t>(h) * hd * hd;
        a.n = s.num_tokens;
        a.dim = hd;
        a.log_decay = log_decay_[static_cast<std::size_t>(h)];
        a.scale = c_.lightning_scale;
        a.bf16_state = bf16_state_;
        lightning_head(a, lightning_chunk_, &lightning_scratch_[static_cast<std::size_t>(tid) * scratch]);
      }
    });
    if (!l.o_norm.empty())
      for (int t = 0; t < T; ++t) {
        float* o = &attn_[static_cast<std::size_t>(t) * l.qd];
        rmsnorm(o, l.o_norm.data(), l.qd, c_.rms_eps, o);
      }
  }

  void rope(float* x, int pos) const {
    const int half = rope_dim_ / 2;
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
      case KvCacheDtype::kBF16: {
        auto* p = reinterpret_cast<uint16_t*>(cache.data()) + index;
        for (int i = 0; i < hd; ++i) p[i] = kernels::f32_to_bf16(src[i]);
        break;
      }
      case KvCacheDtype::kFP16: {
        auto* p = reinterpret_cast<uint16_t*>(cache.data()) + index;
        for (int i = 0; i < hd; ++i) p[i] = kernels::f32_to_fp16(src[i]);
        break;
      }
      case KvCacheDtype::kFP8E4M3:
        for (int i = 0; i < hd; ++i) cache[index + i] = kernels::f32_to_fp8_e4m3(src[i]);
        break;
      case KvCacheDtype::kFP8E5M2:
        for (int i = 0; i < hd; ++i) cache[index + i] = kernels::f32_to_fp8_e5m2(src[i]);
        break;
      case KvCacheDtype::kFP32:
        std::memcpy(reinterpret_cast<float*>(cache.data()) + index, src, sizeof(float) * hd);
        break;
    }
  }

  void load(const std::vector<uint8_t>& cache, std::size_t index, float* dst) const {
    const int hd = c_.head_dim;
    switch (kv_dtype_) {
      case KvCacheDtype::kBF16: {
        auto* p = reinterpret_cast<const uint16_t*>(cache.data()) + index;
        for (int i = 0; i < hd; ++i) dst[i] = kernels::bf16_to_f32(p[i]);
        break;
      }
      case KvCacheDtype::kFP16: {
        auto* p = reinterpret_cast<const uint16_t*>(cache.data()) + index;
        for (int i = 0; i < hd; ++i) dst[i] = tables_.fp16[p[i]];
        break;
      }
      case KvCacheDtype::kFP8E4M3:
        for (int i = 0; i < hd; ++i) dst[i] = tables_.e4m3[cache[index + i]];
        break;
      case KvCacheDtype::kFP8E5M2:
        for (int i = 0; i < hd; ++i) dst[i] = tables_.e5m2[cache[index + i]];
        break;
      case KvCacheDtype::kFP32:
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

  // Causal GQA attention of every token of the step over its own sequence's cached positions 0..pos; one
  // work item per (token, KV head), its query heads sharing the key blocks. A token whose sequence has
  // reached sparse_config.dense_len keys (pos + 1 >= dense_len) attends only to the blocks InfLLM-v2 selects
  // (sparse_attention.h); the switch is per token, so it does not depend on how a prompt is chunked.
  void attention(const Layer& l, const Step& step, int T) {
    const int hd = c_.head_dim, qkv_w = l.row, Hkv = c_.kv_heads, group = c_.group();
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    const SparseAttentionConfig& sp = sparse_cfg_;
    pool_.parallel_for(T * Hkv, [&](int w0, int w1, int tid) {
    for (int wi = w0; wi < w1; ++wi) {
      const int t = wi / Hkv, kvh = wi % Hkv;
      const StepSequence& s = step.seqs[static_cast<std::size_t>(token_seq_[static_cast<std::size_t>(t)])];
      const int pos = step.positions[static_cast<std::size_t>(t)];
      const float* q0 = &qkv_[static_cast<std::size_t>(t) * qkv_w + static_cast<std::size_t>(kvh) * group * hd];
      float* sc = &scores_[static_cast<std::size_t>(tid) * max_ctx_];
      float kbuf[512];
      // Key blocks to attend: [b * bs, b * bs + bs) for each selected b, clipped at pos; dense = one span.
      int* blocks = blocks_.data() + static_cast<std::size_t>(tid) * blocks_stride_;
      int nblocks = 1, bs = pos + 1;
      if (sparse_ && pos + 1 >= sp.dense_len) {
        const int nck = sparse_compressed_keys(pos + 1, sp);
        float* ck = ck_.data() + static_cast<std::size_t>(tid) * ck_stride_;
        sparse_compress_keys(sp, nck, hd, [&](int j) { load(l.k, kv_index(s, j, kvh), kbuf); return kbuf; }, ck);
        nblocks = sparse_select_blocks(sp, q0, group, hd, ck, nck, pos,
                                       sparse_scratch_.data() + static_cast<std::size_t>(tid) * sparse_scratch_stride_, blocks);
        bs = sp.block_size;
      } else {
        blocks = &dense_block_;
      }
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* q = q0 + static_cast<std::size_t>(h - kvh * group) * hd;
        float mx = -std::numeric_limits<float>::infinity();
        int n = 0;   // scores in sc, in the order of the selected positions
        for (int bi = 0; bi < nblocks; ++bi)
          for (int j = blocks[bi] * bs; j <= std::min(pos, blocks[bi] * bs + bs - 1); ++j) {
            load(l.k, kv_index(s, j, kvh), kbuf);
            float dot = 0.f;
            for (int i = 0; i < hd; ++i) dot += q[i] * kbuf[i];
            sc[n] = dot * scale;
            mx = std::max(mx, sc[n++]);
          }
        float sum = 0.f;
        for (int j = 0; j < n; ++j) {
          sc[j] = std::exp(sc[j] - mx);
          sum += sc[j];
        }
        float* o = &attn_[static_cast<std::size_t>(t) * l.qd + static_cast<std::size_t>(h) * hd];
        std::fill(o, o + hd, 0.f);
        const float inv = 1.f / sum;
        n = 0;
        for (int bi = 0; bi < nblocks; ++bi)
          for (int j = blocks[bi] * bs; j <= std::min(pos, blocks[bi] * bs + bs - 1); ++j) {
            load(l.v, kv_index(s, j, kvh), kbuf);
            const float p = sc[n++] * inv;
            for (int i = 0; i < hd; ++i) o[i] += p * kbuf[i];
          }
      }
    }
    });
  }

  int threads_;
  ThreadPool pool_;
  ModelConfig c_;
  KvCacheDtype kv_dtype_ = KvCacheDtype::kBF16;
  int page_size_ = 16, max_T_ = 0, max_R_ = 0, max_ctx_ = 0, num_pages_ = 0;
  std::vector<Layer> layers_;
  std::vector<float> embed_, lm_head_, final_norm_;      // [vocab][d], [vocab][d], [d]
  int rope_dim_ = 0;                                     // rotated head width (0: no layer rotates)
  std::vector<float> cos_, sin_;                         // [max_ctx][rope_dim / 2]
  std::vector<float> x_, xn_;                            // [T][d] residual stream, normed
  int max_qd_ = 0, max_row_ = 0;                         // widest layer q and fused projection
  std::vector<float> qkv_;                               // [T][row] (each layer its own row width)
  std::vector<float> attn_;                              // [T][qd]
  // Lightning: states [lightning layers][slots][heads][d][d] fp32 (bf16-rounded with a bf16 state), log-decays
  // [heads], scratch per thread.
  int lightning_chunk_ = 64;                             // launch.lightning_chunk
  bool bf16_state_ = false;                              // launch.lightning_state_dtype == bf16
  int max_slots_ = 0;
  std::vector<float> state_, log_decay_, lightning_scratch_;
  std::vector<float> gu_, act_;                          // [T][2f], [T][f]
  static constexpr int kLogitRows = 128;
  std::vector<float> rows_, logits_;                     // [kLogitRows][d], [kLogitRows][vocab]
  std::vector<int> token_seq_;                           // [T] index into step.seqs
  std::vector<float> scores_;                            // [threads][max_ctx]
  // InfLLM-v2 sparse attention (only when a context can reach dense_len): per-thread compressed keys
  // [max_ctx / kernel_stride][head_dim], selection scratch, selected blocks.
  bool sparse_ = false;
  SparseAttentionConfig sparse_cfg_;                     // the model's sparse_config with the launch's top-k / window
  int ck_stride_ = 0, sparse_scratch_stride_ = 0, blocks_stride_ = 0;
  std::vector<float> ck_, sparse_scratch_;
  std::vector<int> blocks_;
  int dense_block_ = 0;                                  // the one "block" of a dense query: positions 0..pos
  DecodeTables tables_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace soartune::engine
