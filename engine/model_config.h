// The shape of a Llama-family decoder (Llama / Qwen2 / Mistral style), as read from an HF config.json or
// a synthetic preset. Every tensor shape in weights.h is written in these names.
#pragma once

#include <cstdint>
#include <string>

namespace soartune::engine {

struct ModelConfig {
  std::string name;              // "hf:<dir>" or "synthetic:<preset>"
  int hidden = 0;                // d: residual stream width
  int intermediate = 0;          // f: SwiGLU hidden width
  int layers = 0;                // decoder layers
  int heads = 0;                 // query heads
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

  int q_dim() const { return heads * head_dim; }        // width of q = heads * head_dim
  int kv_dim() const { return kv_heads * head_dim; }    // width of k and v
  int group() const { return heads / kv_heads; }        // query heads per KV head
  // Parameters of the whole model (embeddings counted once when tied).
  int64_t parameter_count() const {
    const int64_t d = hidden, f = intermediate, q = q_dim(), kv = kv_dim();
    const int64_t per_layer = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d;
    return layers * per_layer + int64_t(vocab) * d * (tie_embeddings ? 1 : 2) + d;
  }
};

}  // namespace soartune::engine
