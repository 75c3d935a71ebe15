// The shape of a decoder, as read from an HF config.json or a synthetic preset: Llama-family models
// (Llama / Qwen2 / Mistral) and MiniCPM-SALA (a hybrid of softmax-attention and lightning linear-attention
// layers). Every tensor shape in weights.h is written in these names. The defaults describe a plain Llama
// decoder; MiniCPM-SALA sets the per-layer mixer kinds, the muP scalings, the gates and the lightning and
// sparse-attention fields.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace soartune::engine {

// What a layer's token mixer is.
enum class MixerKind {
  kSoftmax,     // causal GQA softmax attention over the paged KV cache (MiniCPM-SALA "minicpm4")
  kLightning,   // lightning attention (Simple GLA, a fixed-size recurrent state per sequence; "lightning-attn")
};

// InfLLM-v2 sparse attention of the softmax layers (MiniCPM-SALA sparse_config): a query whose sequence has
// reached dense_len tokens attends only to selected key blocks.
struct SparseAttentionConfig {
  bool present = false;          // the model has a sparse_config; false: softmax layers are always dense
  int block_size = 64;           // tokens per key block
  int dense_len = 8192;          // kv length from which attention goes sparse
  int init_blocks = 1;           // leading blocks always attended
  int kernel_size = 32;          // compressed-key window (mean of kernel_size keys)
  int kernel_stride = 16;        // step between compressed-key windows
  int topk = 64;                 // blocks chosen by score, besides the local window
  int window_size = 2048;        // local window in tokens (window_size / block_size blocks always attended)
};

struct ModelConfig {
  std::string name;              // "hf:<dir>" or "synthetic:<preset>"
  int hidden = 0;                // d: residual stream width
  int intermediate = 0;          // f: SwiGLU hidden width
  int layers = 0;                // decoder layers
  int heads = 0;                 // query heads (softmax layers)
  int kv_heads = 0;              // key/value heads (GQA: heads % kv_heads == 0)
  int head_dim = 0;              // per-head width (need not equal hidden / heads)
  int vocab = 0;                 // embedding rows / lm_head rows
  float rms_eps = 1e-5f;         // RMSNorm epsilon
  float rope_theta = 10000.0f;   // RoPE base; half-split rotation (HF rotate_half)
  bool tie_embeddings = false;   // lm_head shares embed_tokens
  bool attention_bias = false;   // q/k/v projections carry a bias (Qwen2)
  int max_position = 4096;       // longest context the model was configured for
  int bos_token = -1;            // -1 = none given
  int eos_token = -1;

  // Per-layer mixer; empty = every layer softmax attention (Llama).
  std::vector<MixerKind> mixers;  // [layers] or empty
  // Softmax layers.
  bool attn_use_rope = true;      // false: NoPE (MiniCPM-SALA attn_use_rope)
  bool attn_output_gate = false;  // o = attn * sigmoid(o_gate(x)) before o_proj (attn_use_output_gate)
  SparseAttentionConfig sparse;
  // Lightning layers (MiniCPM-SALA lightning_*): q/k per-head RMSNorm, RoPE, Simple GLA with the per-head
  // log-decays -alibi_slopes(lightning_heads), one RMSNorm over all heads, sigmoid output gate (z_proj).
  int lightning_heads = 0;        // query heads (lightning_nh)
  int lightning_kv_heads = 0;     // key/value heads (lightning_nkv; lightning_heads % it == 0)
  int lightning_head_dim = 0;     // d_k = d_v per head
  float lightning_scale = 1.0f;   // q scale: 1/sqrt(d) ("1/sqrt(d)") or 1/d ("1/d")
  bool lightning_qk_norm = false;      // qk_norm
  bool lightning_use_rope = false;     // lightning_use_rope
  bool lightning_output_norm = false;  // use_output_norm
  bool lightning_output_gate = false;  // use_output_gate
  // muP scalings (MiniCPM): 1 for Llama.
  float embed_scale = 1.0f;       // h0 = embed[id] * scale_emb
  float residual_scale = 1.0f;    // h += branch * scale_depth / sqrt(layers), both branches of every layer
  float logit_divisor = 1.0f;     // logits = lm_head(norm(h) / (hidden / dim_model_base))

  MixerKind mixer(int layer) const {
    return mixers.empty() ? MixerKind::kSoftmax : mixers[static_cast<std::size_t>(layer)];
  }
  bool has_lightning() const {
    for (MixerKind m : mixers)
      if (m == MixerKind::kLightning) return true;
    return false;
  }
  int softmax_layers() const {
    int n = 0;
    for (int i = 0; i < layers; ++i) n += mixer(i) == MixerKind::kSoftmax;
    return n;
  }

  int q_dim() const { return heads * head_dim; }        // width of q = heads * head_dim
  int kv_dim() const { return kv_heads * head_dim; }    // width of k and v
  int group() const { return heads / kv_heads; }        // query heads per KV head
  int lightning_q_dim() const { return lightning_heads * lightning_head_dim; }
  int lightning_kv_dim() const { return lightning_kv_heads * lightning_head_dim; }
  // Widths of a layer's q (= attention output) and k/v, whatever its mixer.
  int layer_q_dim(int layer) const { return mixer(layer) == MixerKind::kLightning ? lightning_q_dim() : q_dim(); }
  int layer_kv_dim(int layer) const { return mixer(layer) == MixerKind::kLightning ? lightning_kv_dim() : kv_dim(); }
  // fp32 elements of one sequence's lightning state in one lightning layer: heads x d_k x d_v.
  int64_t lightning_state_elems() const {
    return int64_t(lightning_heads) * lightning_head_dim * lightning_head_dim;
  }
  // Parameters of the whole model (embeddings counted once when tied). Summed in double and capped at 2^53
  // (exact below it): the dimensions come from a config.json, and whatever they say, the count and the byte
  // sizes made from it must not overflow; no model comes near the cap.
  int64_t parameter_count() const {
    const double d = hidden, f = intermediate;
    double total = double(vocab) * d * (tie_embeddings ? 1 : 2) + d;
    for (int i = 0; i < layers; ++i) {
      const double q = layer_q_dim(i), kv = layer_kv_dim(i);
      total += d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d;
      if (mixer(i) == MixerKind::kSoftmax) {
        if (attn_output_gate) total += q * d;
      } else {
        if (lightning_output_gate) total += q * d;
        if (lightning_qk_norm) total += 2.0 * lightning_head_dim;
        if (lightning_output_norm) total += q;
      }
    }
    return static_cast<int64_t>(std::min(total, 9007199254740992.0));
  }
};

// Lightning attention's per-head log-decays g_h = -slope_h, the ALiBi power-of-two slope schedule of
// MiniCPM-SALA (_build_slope_tensor), the same in every layer: for n a power of two slope_i = start^(i+1)
// with start = 2^(-8/n); otherwise slopes(p) followed by every other slope of slopes(2p), p = 2^floor(log2 n).
inline std::vector<double> alibi_slopes(int n) {
  auto pow2 = [](int m) {
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(m)) - 3)));
    std::vector<double> s(static_cast<std::size_t>(m));
    for (int i = 0; i < m; ++i) s[static_cast<std::size_t>(i)] = std::pow(start, i + 1);
    return s;
  };
  if (n <= 0) return {};
  const int p = 1 << static_cast<int>(std::floor(std::log2(static_cast<double>(n))));
  if (p == n) return pow2(n);
  std::vector<double> s = pow2(p);
  const std::vector<double> twice = alibi_slopes(2 * p);
  for (int i = 0; static_cast<int>(s.size()) < n; i += 2) s.push_back(twice[static_cast<std::size_t>(i)]);
  return s;
}

}  // namespace soartune::engine
