#include "engine/model_loader.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/synthetic_presets.h"
#include "engine/gptq_format.h"
#include "engine/safetensors.h"
#include "engine/system_memory.h"
#include "kernels/numeric_formats.h"

namespace soartune::engine {

namespace {

// A MiniCPM-SALA preset with the release's semantics: softmax layers at `softmax` (NoPE, output gate, InfLLM-v2
// sparse_config of the release), lightning layers elsewhere with as many heads of the same width as the
// softmax layers' queries, no GQA, qk-norm, RoPE, output norm and gate; muP scale_emb 12, scale_depth 1.4,
// logits divided by 16.
void make_minicpm_sala(ModelConfig* c, const std::vector<int>& softmax) {
  c->mixers.assign(static_cast<std::size_t>(c->layers), MixerKind::kLightning);
  for (int i : softmax) c->mixers[static_cast<std::size_t>(i)] = MixerKind::kSoftmax;
  c->attn_use_rope = false;
  c->attn_output_gate = true;
  c->sparse = SparseAttentionConfig{true, 64, 8192, 1, 32, 16, 64, 2048};
  c->lightning_heads = c->heads;
  c->lightning_kv_heads = c->heads;
  c->lightning_head_dim = c->head_dim;
  c->lightning_scale = 1.f / std::sqrt(static_cast<float>(c->head_dim));
  c->lightning_qk_norm = c->lightning_use_rope = c->lightning_output_norm = c->lightning_output_gate = true;
  c->embed_scale = 12.f;
  c->residual_scale = static_cast<float>(1.4 / std::sqrt(static_cast<double>(c->layers)));
  c->logit_divisor = 16.f;
}

// Counter-based generator: value i of tensor `stream` depends only on (seed, stream, i), so tensors
// fill in parallel and identically on every machine.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-a, a] as bf16 bits.
void fill_uniform_bf16(UninitVector<uint16_t>* v, std::size_t n, float a, uint64_t seed, uint64_t stream) {
  v->resize(n);
  const uint64_t key = mix(seed * 0x100000001b3ull + stream);
  const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  const std::size_t chunk = (n + nt - 1) / nt;
  for (unsigned t = 0; t < nt; ++t) {
    const std::size_t b = t * chunk, e = std::min(n, b + chunk);
    if (b >= e) break;
    threads.emplace_back([=] {
      uint16_t* out = v->data();
      for (std::size_t i = b; i < e; ++i) {
        const uint64_t r = mix(key ^ i);
        const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        out[i] = kernels::f32_to_bf16((2.f * u - 1.f) * a);
      }
    });
  }
  for (auto& t : threads) t.join();
}

QuantizedLinear random_linear(int out, int in, uint64_t seed, uint64_t stream) {
  QuantizedLinear l;
  l.out = out;
  l.in = in;
  l.bits = 16;
  // Uniform with variance 1/in keeps activations of a random decoder O(1).
  fill_uniform_bf16(&l.w16, static_cast<std::size_t>(out) * in, std::sqrt(3.f / in), seed, stream);
  return l;
}

Status check_memory(const ModelConfig& c, const std::string& spec) {
  const std::size_t need = weight_bytes_16(c);
  const std::size_t avail = available_memory_bytes();
  if (avail && need > avail * 9 / 10)
    return Status::Exhausted("model: " + spec + " needs " + std::to_string(need >> 20) + " MiB of host memory for its 16-bit weights; " +
                             std::to_string(avail >> 20) + " MiB available");
  return Status::Ok();
}

Result<ModelWeights> synthetic_model(const std::string& preset, uint64_t seed) {
  auto cfg = synthetic_config(preset);
  if (!cfg.ok()) return cfg.status();
  ModelWeights w;
  w.config = cfg.value();
  const ModelConfig& c = w.config;
  if (Status s = check_memory(c, c.name); !s.ok()) return s;
  uint64_t stream = 0;
  w.embed.out = c.vocab;
  w.embed.in = c.hidden;
  // Embedding rows of unit RMS, so the first RMSNorm sees the same scale as later layers.
  fill_uniform_bf16(&w.embed.w16, static_cast<std::size_t>(c.vocab) * c.hidden, std::sqrt(3.f), seed, stream++);
  w.layers.resize(static_cast<std::size_t>(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    LayerWeights& l = w.layers[static_cast<std::size_t>(i)];
    const int qd = c.layer_q_dim(i), kvd = c.layer_kv_dim(i);
    const bool lightning = c.mixer(i) == MixerKind::kLightning;
    l.attn_norm.assign(static_cast<std::size_t>(c.hidden), 1.f);
    l.mlp_norm.assign(static_cast<std::size_t>(c.hidden), 1.f);
    l.wq = random_linear(qd, c.hidden, seed, stream++);
    l.wk = random_linear(kvd, c.hidden, seed, stream++);
    l.wv = random_linear(kvd, c.hidden, seed, stream++);
    l.wo = random_linear(c.hidden, qd, seed, stream++);
    if (lightning ? c.lightning_output_gate : c.attn_output_gate) l.w_out_gate = random_linear(qd, c.hidden, seed, stream++);
    if (lightning && c.lightning_qk_norm) {
      l.q_norm.assign(static_cast<std::size_t>(c.lightning_head_dim), 1.f);
      l.k_norm.assign(static_cast<std::size_t>(c.lightning_head_dim), 1.f);
    }
    if (lightning && c.lightning_output_norm) l.o_norm.assign(static_cast<std::size_t>(qd), 1.f);
    l.w_gate = random_linear(c.intermediate, c.hidden, seed, stream++);
    l.w_up = random_linear(c.intermediate, c.hidden, seed, stream++);
    l.w_down = random_linear(c.hidden, c.intermediate, seed, stream++);
  }
  w.final_norm.assign(static_cast<std::size_t>(c.hidden), 1.f);
  w.lm_head = random_linear(c.vocab, c.hidden, seed, stream++);
  return w;
}

// config.json is untrusted input. A numeric key of the wrong type, or outside what the engine's int and float
// fields hold and its arithmetic on them allows, is an error naming the key: a silent default would load another
// model, and an unchecked conversion is undefined behaviour. Absent or null: *out keeps its default.
Status get_int(const nlohmann::json& j, const char* key, const std::string& field, int64_t lo, int64_t hi, int* out,
               bool* found = nullptr) {
  if (found) *found = false;
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  int64_t v = 0;
  bool in_range = false;
  if (it->is_number_unsigned()) {
    in_range = it->get<uint64_t>() <= static_cast<uint64_t>(hi);
    if (in_range) v = static_cast<int64_t>(it->get<uint64_t>());
  } else if (it->is_number_integer()) {
    v = it->get<int64_t>();
    in_range = v <= hi;
  }
  if (!in_range || v < lo) return Status::Invalid(field + ": must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  *out = static_cast<int>(v);
  if (found) *found = true;
  return Status::Ok();
}

Status get_real(const nlohmann::json& j, const char* key, const std::string& field, double lo, double hi, double* out,
                bool* found = nullptr) {
  if (found) *found = false;
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number() || !(it->get<double>() >= lo && it->get<double>() <= hi)) {
    std::ostringstream m;
    m << field << ": must be a number in [" << lo << ", " << hi << "]";
    return Status::Invalid(m.str());
  }
  *out = it->get<double>();
  if (found) *found = true;
  return Status::Ok();
}

// A string key; absent or null: *out keeps its default.
Status get_string(const nlohmann::json& j, const char* key, const std::string& field, std::string* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return Status::Invalid(field + ": must be a string");
  *out = it->get<std::string>();
  return Status::Ok();
}

// Bounds of the shape fields: every int product the engine forms from them (heads * head_dim, ...) fits an int,
// and the layer loop of parameter_count() stays short.
constexpr int64_t kMaxWidth = 1 << 20;        // hidden_size, intermediate_size
constexpr int64_t kMaxLayers = 100000;        // num_hidden_layers (as the daemon checks it)
constexpr int64_t kMaxHeads = 4096;           // num_attention_heads, num_key_value_heads, lightning_nh, lightning_nkv
constexpr int64_t kMaxHeadDim = 4096;         // head_dim, lightning_head_dim
constexpr int64_t kMaxVocab = 1 << 24;        // vocab_size
constexpr double kMaxScale = 1e30;            // rope_theta and the muP scalings (float fields)

bool is_minicpm_sala(const nlohmann::json& j) {
  if (const auto t = j.find("model_type"); t != j.end() && t->is_string() && t->get<std::string>() == "minicpm_sala") return true;
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      if (a.is_string() && a.get<std::string>() == "MiniCPMSALAForCausalLM") return true;
  return false;
}

// A boolean key with its default; anything but true/false/absent is an error naming the key.
Status get_bool(const nlohmann::json& j, const char* key, bool def, bool* out) {
  *out = def;
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  if (!j[key].is_boolean()) return Status::Invalid("config.json " + std::string(key) + ": must be true or false");
  *out = j[key].get<bool>();
  return Status::Ok();
}

// A key the engine implements at one value only: absent or equal to `supported`.
Status require_bool(const nlohmann::json& j, const char* key, bool supported) {
  bool v = supported;
  if (Status s = get_bool(j, key, supported, &v); !s.ok()) return s;
  if (v != supported)
    return Status::Invalid("config.json " + std::string(key) + ": " + (v ? "true" : "false") +
                           " is not supported; allowed: " + (supported ? "true" : "false"));
  return Status::Ok();
}

// MiniCPM-SALA (MiniCPMSALAForCausalLM): the release config.json keys, read as the official modeling code
// reads them (modeling_minicpm_sala.py); every value the engine does not implement is refused by name.
Status read_minicpm_sala(const nlohmann::json& j, ModelConfig* out) {
  ModelConfig& c = *out;
  // Softmax ("minicpm4") layers size their heads as hidden_size / num_attention_heads (MiniCPMAttention
  // does not read head_dim); the lightning layers read head_dim.
  if (c.hidden % c.heads != 0)
    return Status::Invalid("config.json num_attention_heads: " + std::to_string(c.heads) + " does not divide hidden_size " + std::to_string(c.hidden));
  c.head_dim = c.hidden / c.heads;
  if (c.attention_bias) return Status::Invalid("config.json attention_bias: true is not supported for MiniCPM-SALA; allowed: false");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    return Status::Invalid("config.json rope_scaling: only null is supported for MiniCPM-SALA");
  if (!j.contains("mixer_types") || !j["mixer_types"].is_array())
    return Status::Invalid("config.json mixer_types: missing or not a list");
  const auto& mt = j["mixer_types"];
  if (static_cast<int>(mt.size()) != c.layers)
    return Status::Invalid("config.json mixer_types: " + std::to_string(mt.size()) + " entries for num_hidden_layers " + std::to_string(c.layers));
  c.mixers.clear();
  for (std::size_t i = 0; i < mt.size(); ++i) {
    const std::string m = mt[i].is_string() ? mt[i].get<std::string>() : mt[i].dump();
    if (m == "minicpm4") c.mixers.push_back(MixerKind::kSoftmax);
    else if (m == "lightning-attn" || m == "lightning_attn" || m == "lightning") c.mixers.push_back(MixerKind::kLightning);
    else
      return Status::Invalid("config.json mixer_types[" + std::to_string(i) + "]: '" + m +
                             "' is not one of minicpm4, lightning-attn, lightning_attn, lightning");
  }
  // Softmax layers.
  bool rope = true;
  if (Status s = get_bool(j, "attn_use_rope", true, &rope); !s.ok()) return s;
  c.attn_use_rope = rope;
  if (Status s = get_bool(j, "attn_use_output_gate", false, &c.attn_output_gate); !s.ok()) return s;
  // Lightning layers. The HF code takes their query heads from num_attention_heads and their width from
  // head_dim; the SGLang and vLLM ports read lightning_nh / lightning_head_dim. Equal in the release; a
  // checkpoint where they differ is ambiguous and refused.
  c.lightning_heads = c.heads;
  c.lightning_kv_heads = c.kv_heads;
  if (Status s = get_int(j, "lightning_nkv", "config.json lightning_nkv", 1, kMaxHeads, &c.lightning_kv_heads); !s.ok()) return s;
  int nh = c.heads;
  if (Status s = get_int(j, "lightning_nh", "config.json lightning_nh", 1, kMaxHeads, &nh); !s.ok()) return s;
  if (nh != c.heads)
    return Status::Invalid("config.json lightning_nh: " + std::to_string(nh) + " differs from num_attention_heads " + std::to_string(c.heads) +
                           " (the official code reads the latter, its ports the former); only equal values are supported");
  int hd = c.head_dim;
  bool has_head_dim = false;
  if (Status s = get_int(j, "head_dim", "config.json head_dim", 1, kMaxHeadDim, &hd, &has_head_dim); !s.ok()) return s;
  c.lightning_head_dim = hd;
  int lhd = hd;
  bool has_lhd = false;
  if (Status s = get_int(j, "lightning_head_dim", "config.json lightning_head_dim", 1, kMaxHeadDim, &lhd, &has_lhd); !s.ok()) return s;
  if (has_lhd) {
    if (has_head_dim && lhd != hd)
      return Status::Invalid("config.json lightning_head_dim: " + std::to_string(lhd) + " differs from head_dim " + std::to_string(hd) +
                             " (the official code reads the latter, its ports the former); only equal values are supported");
    c.lightning_head_dim = lhd;
  }
  if (c.lightning_head_dim <= 0 || c.lightning_head_dim % 2 != 0)
    return Status::Invalid("config.json lightning_head_dim: must be a positive even integer");
  if (c.lightning_kv_heads <= 0 || c.lightning_heads % c.lightning_kv_heads != 0)
    return Status::Invalid("config.json lightning_nkv: " + std::to_string(c.lightning_kv_heads) + " does not divide the lightning heads " +
                           std::to_string(c.lightning_heads));
  std::string scale = "1/sqrt(d)";
  if (Status s = get_string(j, "lightning_scale", "config.json lightning_scale", &scale); !s.ok()) return s;
  if (scale == "1/sqrt(d)") c.lightning_scale = 1.f / std::sqrt(static_cast<float>(c.lightning_head_dim));
  else if (scale == "1/d") c.lightning_scale = 1.f / static_cast<float>(c.lightning_head_dim);
  else return Status::Invalid("config.json lightning_scale: '" + scale + "' is not supported; allowed: 1/sqrt(d), 1/d");
  if (Status s = get_bool(j, "lightning_use_rope", true, &c.lightning_use_rope); !s.ok()) return s;
  if (Status s = get_bool(j, "qk_norm", true, &c.lightning_qk_norm); !s.ok()) return s;
  if (Status s = get_bool(j, "use_output_norm", false, &c.lightning_output_norm); !s.ok()) return s;
  if (Status s = get_bool(j, "use_output_gate", false, &c.lightning_output_gate); !s.ok()) return s;
  // One RoPE table serves both kinds of layer.
  if (c.attn_use_rope && c.lightning_use_rope && c.has_lightning() && c.lightning_head_dim != c.head_dim)
    return Status::Invalid("config.json attn_use_rope: RoPE on softmax layers of head width " + std::to_string(c.head_dim) +
                           " beside lightning layers of width " + std::to_string(c.lightning_head_dim) + " is not supported; allowed: false");
  // muP.
  double scale_emb = 0, scale_depth = 0, dim_model_base = 0;
  for (auto [key, dst] : {std::pair{"scale_emb", &scale_emb}, {"scale_depth", &scale_depth}, {"dim_model_base", &dim_model_base}}) {
    const std::string field = "config.json " + std::string(key);
    bool found = false;
    if (Status s = get_real(j, key, field, 0, kMaxScale, dst, &found); !s.ok() || !found || !(*dst > 0))
      return Status::Invalid(field + ": missing or not a positive number (at most 1e30)");
  }
  c.embed_scale = static_cast<float>(scale_emb);
  c.residual_scale = static_cast<float>(scale_depth / std::sqrt(static_cast<double>(c.layers)));
  c.logit_divisor = static_cast<float>(c.hidden / dim_model_base);
  // InfLLM-v2 sparse attention of the softmax layers.
  c.sparse = SparseAttentionConfig{};
  if (j.contains("sparse_config") && !j["sparse_config"].is_null()) {
    const auto& sc = j["sparse_config"];
    if (!sc.is_object()) return Status::Invalid("config.json sparse_config: must be a mapping or null");
    SparseAttentionConfig& sp = c.sparse;
    sp.present = true;
    for (auto [key, dst] : {std::pair{"block_size", &sp.block_size}, {"dense_len", &sp.dense_len}, {"init_blocks", &sp.init_blocks},
                            {"kernel_size", &sp.kernel_size}, {"kernel_stride", &sp.kernel_stride}, {"topk", &sp.topk},
                            {"window_size", &sp.window_size}}) {
      if (Status s = get_int(sc, key, "config.json sparse_config." + std::string(key), 0, INT32_MAX, dst); !s.ok()) return s;
    }
    if (Status s = require_bool(sc, "use_nope", false); !s.ok())
      return Status::Invalid("config.json sparse_config." + s.message.substr(std::string("config.json ").size()));
    if (sp.block_size <= 0 || sp.kernel_size <= 0 || sp.kernel_stride <= 0 || sp.block_size % sp.kernel_stride != 0 ||
        sp.window_size % sp.block_size != 0)
      return Status::Invalid("config.json sparse_config: block_size, kernel_size and kernel_stride must be positive, with "
                             "kernel_stride dividing block_size and block_size dividing window_size");
    if (sp.topk <= sp.init_blocks)
      return Status::Invalid("config.json sparse_config.topk: " + std::to_string(sp.topk) + " must exceed init_blocks " +
                             std::to_string(sp.init_blocks) + " (the initial blocks count within topk)");
  }
  return Status::Ok();
}

// A linear as the checkpoint holds it: 16-bit `.weight`, or GPTQ tensors (`.qweight` ...; gptq_format.h)
// read as the same quantised weights, when `gptq_zero_offset` >= 0 says the checkpoint is GPTQ.
Status hf_linear(const Checkpoint& ck, const std::string& name, int out, int in, bool bias, QuantizedLinear* l,
                 int gptq_zero_offset = -1) {
  l->out = out;
  l->in = in;
  l->bits = 16;
  if (gptq_zero_offset >= 0 && ck.has(name + ".qweight")) {
    if (Status s = read_gptq_linear(ck, name, out, in, gptq_zero_offset, l); !s.ok()) return s;
  } else {
    bool fp16 = false;
    if (Status s = ck.read_16(name + ".weight", {out, in}, &l->w16, &fp16); !s.ok()) return s;
    l->dtype16 = fp16 ? Dtype16::kFP16 : Dtype16::kBF16;
  }
  if (bias || ck.has(name + ".bias")) {
    if (Status s = ck.read_f32(name + ".bias", {out}, &l->bias); !s.ok()) return s;
  }
  return Status::Ok();
}

Result<ModelWeights> hf_model(const std::string& dir) {
  auto cfg = read_hf_config(dir);
  if (!cfg.ok()) return cfg.status();
  ModelWeights w;
  w.config = cfg.value();
  ModelConfig& c = w.config;
  if (Status s = check_memory(c, c.name); !s.ok()) return s;
  auto ck_or = Checkpoint::open_dir(dir);
  if (!ck_or.ok()) return ck_or.status();
  const Checkpoint& ck = ck_or.value();
  // A GPTQ checkpoint (AutoGPTQ / GPTQModel / ours): its quantised linears load as quantised weights.
  int zo = -1;
  for (const std::string& n : ck.names())
    if (n.size() > 8 && n.compare(n.size() - 8, 8, ".qweight") == 0) {
      auto z = gptq_zero_offset(dir);
      if (!z.ok()) return z.status();
      zo = z.value();
      break;
    }
  const int d = c.hidden;
  if (Status s = hf_linear(ck, "model.embed_tokens", c.vocab, d, false, &w.embed); !s.ok()) return s;
  w.layers.resize(static_cast<std::size_t>(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    LayerWeights& l = w.layers[static_cast<std::size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const int qd = c.layer_q_dim(i), kvd = c.layer_kv_dim(i);
    const bool lightning = c.mixer(i) == MixerKind::kLightning;
    Status s = ck.read_f32(p + "input_layernorm.weight", {d}, &l.attn_norm);
    if (s.ok()) s = ck.read_f32(p + "post_attention_layernorm.weight", {d}, &l.mlp_norm);
    if (s.ok()) s = hf_linear(ck, p + "self_attn.q_proj", qd, d, c.attention_bias, &l.wq, zo);
    if (s.ok()) s = hf_linear(ck, p + "self_attn.k_proj", kvd, d, c.attention_bias, &l.wk, zo);
    if (s.ok()) s = hf_linear(ck, p + "self_attn.v_proj", kvd, d, c.attention_bias, &l.wv, zo);
    if (s.ok()) s = hf_linear(ck, p + "self_attn.o_proj", d, qd, false, &l.wo, zo);
    if (s.ok() && !lightning && c.attn_output_gate) s = hf_linear(ck, p + "self_attn.o_gate", qd, d, false, &l.w_out_gate, zo);
    if (s.ok() && lightning && c.lightning_output_gate) s = hf_linear(ck, p + "self_attn.z_proj", qd, d, false, &l.w_out_gate, zo);
    if (s.ok() && lightning && c.lightning_qk_norm) {
      s = ck.read_f32(p + "self_attn.q_norm.weight", {c.lightning_head_dim}, &l.q_norm);
      if (s.ok()) s = ck.read_f32(p + "self_attn.k_norm.weight", {c.lightning_head_dim}, &l.k_norm);
    }
    if (s.ok() && lightning && c.lightning_output_norm) s = ck.read_f32(p + "self_attn.o_norm.weight", {qd}, &l.o_norm);
    if (s.ok()) s = hf_linear(ck, p + "mlp.gate_proj", c.intermediate, d, false, &l.w_gate, zo);
    if (s.ok()) s = hf_linear(ck, p + "mlp.up_proj", c.intermediate, d, false, &l.w_up, zo);
    if (s.ok()) s = hf_linear(ck, p + "mlp.down_proj", d, c.intermediate, false, &l.w_down, zo);
    if (!s.ok()) return s;
  }
  if (Status s = ck.read_f32("model.norm.weight", {d}, &w.final_norm); !s.ok()) return s;
  if (!c.tie_embeddings && (ck.has("lm_head.weight") || ck.has("lm_head.qweight"))) {
    if (Status s = hf_linear(ck, "lm_head", c.vocab, d, false, &w.lm_head, zo); !s.ok()) return s;
  } else {
    c.tie_embeddings = true;   // no lm_head tensor: HF ties it to the embeddings
    w.lm_head = w.embed;
  }
  return w;
}

}  // namespace

std::size_t weight_bytes_16(const ModelConfig& c) {
  return static_cast<std::size_t>(c.parameter_count()) * 2;
}

Result<ModelConfig> synthetic_config(const std::string& preset) {
  Result<core::SyntheticPreset> found = core::find_synthetic_preset(preset);
  if (!found.ok()) return found.status();
  const core::SyntheticPreset& p = found.value();
  ModelConfig c;
  c.name = "synthetic:" + preset;
  c.hidden = p.hidden;
  c.intermediate = p.intermediate;
  c.layers = p.layers;
  c.heads = p.heads;
  c.kv_heads = p.kv_heads;
  c.head_dim = p.head_dim;
  c.vocab = p.vocab;
  c.rms_eps = p.rms_eps;
  c.rope_theta = p.rope_theta;
  c.max_position = p.max_position;
  if (!p.sala_softmax_layers.empty()) make_minicpm_sala(&c, p.sala_softmax_layers);
  return c;
}

Result<ModelConfig> read_hf_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) return Status::NotFound("model: " + path + " not found");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Invalid("model: " + path + " is not JSON");
  if (!j.is_object()) return Status::Invalid("model: " + path + " is not a JSON object");
  ModelConfig c;
  c.name = "hf:" + dir;
  for (auto [key, out, hi] : {std::tuple{"hidden_size", &c.hidden, kMaxWidth}, {"intermediate_size", &c.intermediate, kMaxWidth},
                              {"num_hidden_layers", &c.layers, kMaxLayers}, {"num_attention_heads", &c.heads, kMaxHeads},
                              {"vocab_size", &c.vocab, kMaxVocab}}) {
    const std::string field = "config.json " + std::string(key);
    bool found = false;
    if (Status s = get_int(j, key, field, 1, hi, out, &found); !s.ok() || !found)
      return Status::Invalid(field + ": missing or not an integer in 1.." + std::to_string(hi));
  }
  c.kv_heads = c.heads;
  if (Status s = get_int(j, "num_key_value_heads", "config.json num_key_value_heads", 1, kMaxHeads, &c.kv_heads); !s.ok()) return s;
  c.head_dim = c.hidden / c.heads;
  if (Status s = get_int(j, "head_dim", "config.json head_dim", 1, kMaxHeadDim, &c.head_dim); !s.ok()) return s;
  if (c.kv_heads <= 0 || c.heads % c.kv_heads != 0)
    return Status::Invalid("config.json num_key_value_heads: " + std::to_string(c.kv_heads) + " does not divide num_attention_heads " + std::to_string(c.heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) return Status::Invalid("config.json head_dim: must be a positive even integer");
  double eps = 1e-6;
  if (Status s = get_real(j, "rms_norm_eps", "config.json rms_norm_eps", 0, 1, &eps); !s.ok()) return s;
  c.rms_eps = static_cast<float>(eps);
  double theta = 10000.0;
  const nlohmann::json* rope = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = &j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rope = &j["rope_scaling"];
  bool has_theta = false;
  if (Status s = get_real(j, "rope_theta", "config.json rope_theta", 1e-30, kMaxScale, &theta, &has_theta); !s.ok()) return s;
  if (!has_theta && rope)
    if (Status s = get_real(*rope, "rope_theta", "config.json rope_parameters.rope_theta", 1e-30, kMaxScale, &theta); !s.ok()) return s;
  if (rope) {
    std::string type = "default";
    if (Status s = get_string(*rope, "type", "config.json rope_parameters.type", &type); !s.ok()) return s;
    if (Status s = get_string(*rope, "rope_type", "config.json rope_parameters.rope_type", &type); !s.ok()) return s;
    if (type != "default")
      return Status::Invalid("config.json rope_parameters.rope_type: " + type + " is not supported; allowed: default");
  }
  c.rope_theta = static_cast<float>(theta);
  if (Status s = get_bool(j, "tie_word_embeddings", false, &c.tie_embeddings); !s.ok()) return s;
  std::string type = "llama";
  if (Status s = get_string(j, "model_type", "config.json model_type", &type); !s.ok()) return s;
  if (Status s = get_bool(j, "attention_bias", type == "qwen2", &c.attention_bias); !s.ok()) return s;
  if (Status s = get_int(j, "max_position_embeddings", "config.json max_position_embeddings", 1, INT32_MAX, &c.max_position); !s.ok())
    return s;
  if (Status s = get_int(j, "bos_token_id", "config.json bos_token_id", 0, INT32_MAX, &c.bos_token); !s.ok()) return s;
  if (j.contains("eos_token_id")) {
    // One id or a list of them; the engine stops on the first.
    nlohmann::json eos = j["eos_token_id"];
    if (eos.is_array() && !eos.empty()) eos = nlohmann::json{{"id", eos[0]}};
    else eos = nlohmann::json{{"id", eos.is_array() ? nlohmann::json() : eos}};
    if (Status s = get_int(eos, "id", "config.json eos_token_id", 0, INT32_MAX, &c.eos_token); !s.ok()) return s;
  }
  std::string act = "silu";
  if (Status s = get_string(j, "hidden_act", "config.json hidden_act", &act); !s.ok()) return s;
  if (act != "silu") return Status::Invalid("config.json hidden_act: " + act + " is not supported; allowed: silu");
  if (is_minicpm_sala(j))
    if (Status s = read_minicpm_sala(j, &c); !s.ok()) return s;
  return c;
}

Result<ModelWeights> load_model(const std::string& spec, uint64_t seed) {
  if (spec.rfind("hf:", 0) == 0) return hf_model(spec.substr(3));
  if (spec.rfind("synthetic:", 0) == 0) return synthetic_model(spec.substr(10), seed);
  return Status::Invalid("model: '" + spec + "' is not one of hf:<dir>, synthetic:<preset>");
}

}  // namespace soartune::engine
