#include "engine/model_loader.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

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
void fill_uniform_bf16(std::vector<uint16_t>* v, std::size_t n, float a, uint64_t seed, uint64_t stream) {
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

template <typename T>
bool get_num(const nlohmann::json& j, const char* key, T* out) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_number()) return false;
  *out = j[key].get<T>();
  return true;
}

bool is_minicpm_sala(const nlohmann::json& j) {
  if (j.value("model_type", std::string()) == "minicpm_sala") return true;
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
  get_num(j, "lightning_nkv", &c.lightning_kv_heads);
  int nh = c.heads;
  if (get_num(j, "lightning_nh", &nh) && nh != c.heads)
    return Status::Invalid("config.json lightning_nh: " + std::to_string(nh) + " differs from num_attention_heads " + std::to_string(c.heads) +
                           " (the official code reads the latter, its ports the former); only equal values are supported");
  int hd = c.head_dim;
  const bool has_head_dim = get_num(j, "head_dim", &hd);
  c.lightning_head_dim = hd;
  int lhd = hd;
  if (get_num(j, "lightning_head_dim", &lhd)) {
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
  const std::string scale = j.value("lightning_scale", std::string("1/sqrt(d)"));
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
  if (!get_num(j, "scale_emb", &scale_emb) || scale_emb <= 0) return Status::Invalid("config.json scale_emb: missing or not a positive number");
  if (!get_num(j, "scale_depth", &scale_depth) || scale_depth <= 0) return Status::Invalid("config.json scale_depth: missing or not a positive number");
  if (!get_num(j, "dim_model_base", &dim_model_base) || dim_model_base <= 0)
    return Status::Invalid("config.json dim_model_base: missing or not a positive number");
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
      if (sc.contains(key) && !(get_num(sc, key, dst) && *dst >= 0))
        return Status::Invalid("config.json sparse_config." + std::string(key) + ": must be a non-negative integer");
    }
    if (Status s = require_bool(sc, "use_nope", false); !s.ok())
      return Status::Invalid("config.json sparse_config." + s.message.substr(std::string("config.json ").size()));
    if (sp.block_size <= 0 || sp.kernel_size <= 0 || sp.kernel_stride <= 0 || sp.block_size % sp.kernel_stride != 0 ||
        sp.window_size % sp.block_size != 0)
      return Status::Invalid("config.json sparse_config: block_size, kernel_size and kernel_stride must be positive, with "
                             "kernel_stride dividing block_size and block_size dividing window_size");
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
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return Status::Invalid("model: " + path + " is not JSON: " + e.what());
  }
  ModelConfig c;
  c.name = "hf:" + dir;
  auto need = [&](const char* key, int* out) -> Status {
    if (!get_num(j, key, out) || *out <= 0) return Status::Invalid("config.json " + std::string(key) + ": missing or not a positive integer");
    return Status::Ok();
  };
  for (auto [key, out] : {std::pair{"hidden_size", &c.hidden}, {"intermediate_size", &c.intermediate},
                          {"num_hidden_layers", &c.layers}, {"num_attention_heads", &c.heads}, {"vocab_size", &c.vocab}}) {
    if (Status s = need(key, out); !s.ok()) return s;
  }
  c.kv_heads = c.heads;
  get_num(j, "num_key_value_heads", &c.kv_heads);
  c.head_dim = c.hidden / c.heads;
  get_num(j, "head_dim", &c.head_dim);
  if (c.kv_heads <= 0 || c.heads % c.kv_heads != 0)
    return Status::Invalid("config.json num_key_value_heads: " + std::to_string(c.kv_heads) + " does not divide num_attention_heads " + std::to_string(c.heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) return Status::Invalid("config.json head_dim: must be a positive even integer");
  double eps = 1e-6;
  get_num(j, "rms_norm_eps", &eps);
  c.rms_eps = static_cast<float>(eps);
  double theta = 10000.0;
  const nlohmann::json* rope = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = &j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rope = &j["rope_scaling"];
  if (!get_num(j, "rope_theta", &theta) && rope) get_num(*rope, "rope_theta", &theta);
  if (rope) {
    const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
    if (type != "default")
      return Status::Invalid("config.json rope_parameters.rope_type: " + type + " is not supported; allowed: default");
  }
  c.rope_theta = static_cast<float>(theta);
  c.tie_embeddings = j.value("tie_word_embeddings", false);
  const std::string type = j.value("model_type", std::string("llama"));
  c.attention_bias = j.value("attention_bias", type == "qwen2");
  get_num(j, "max_position_embeddings", &c.max_position);
  get_num(j, "bos_token_id", &c.bos_token);
  if (j.contains("eos_token_id")) {
    if (j["eos_token_id"].is_number()) c.eos_token = j["eos_token_id"].get<int>();
    else if (j["eos_token_id"].is_array() && !j["eos_token_id"].empty()) c.eos_token = j["eos_token_id"][0].get<int>();
  }
  if (j.value("hidden_act", std::string("silu")) != "silu")
    return Status::Invalid("config.json hidden_act: " + j["hidden_act"].get<std::string>() + " is not supported; allowed: silu");
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
