#include "core/knob_catalogue.h"

#include <algorithm>
#include <charconv>

#include "core/kernel_variants.h"

namespace soartune::core {

namespace {

// Typed access to a LaunchConfig field, one instantiation per field.
template <int LaunchConfig::*F>
Value get_int(const LaunchConfig& c) { return int64_t{c.*F}; }
template <int LaunchConfig::*F>
void set_int(LaunchConfig& c, const Value& v) { c.*F = static_cast<int>(std::get<int64_t>(v)); }
template <bool LaunchConfig::*F>
Value get_bool(const LaunchConfig& c) { return c.*F; }
template <bool LaunchConfig::*F>
void set_bool(LaunchConfig& c, const Value& v) { c.*F = std::get<bool>(v); }
template <std::string LaunchConfig::*F>
Value get_string(const LaunchConfig& c) { return c.*F; }
template <std::string LaunchConfig::*F>
void set_string(LaunchConfig& c, const Value& v) { c.*F = std::get<std::string>(v); }

Value get_state_dtype(const LaunchConfig& c) { return std::string(state_dtype_name(c.lightning_state_dtype)); }
void set_state_dtype(LaunchConfig& c, const Value& v) {
  const std::string& s = std::get<std::string>(v);
  for (StateDtype d : {StateDtype::kFP32, StateDtype::kBF16})
    if (s == state_dtype_name(d)) c.lightning_state_dtype = d;
}

Value get_kv_dtype(const LaunchConfig& c) { return std::string(kv_cache_dtype_name(c.kv_cache_dtype)); }
void set_kv_dtype(LaunchConfig& c, const Value& v) {
  const std::string& s = std::get<std::string>(v);
  for (KvCacheDtype d : {KvCacheDtype::kBF16, KvCacheDtype::kFP16, KvCacheDtype::kFP8E4M3, KvCacheDtype::kFP8E5M2})
    if (s == kv_cache_dtype_name(d)) c.kv_cache_dtype = d;
}

std::vector<Value> ints(std::initializer_list<int64_t> v) { return {v.begin(), v.end()}; }

ServingFlag flag(std::vector<std::string> flags, std::map<std::string, std::string> value_map = {}) {
  ServingFlag f;
  f.rule = ServingFlag::Rule::kValue;
  f.flags = std::move(flags);
  f.value_map = std::move(value_map);
  return f;
}
ServingFlag unmapped(std::string why) {
  ServingFlag f;
  f.note = std::move(why);
  return f;
}
ServingFlag checkpoint(std::string what) {
  ServingFlag f;
  f.rule = ServingFlag::Rule::kCheckpoint;
  f.note = std::move(what);
  return f;
}

const std::vector<Value>& weight_bit_values() {
  static const std::vector<Value> kBits = ints({16, 8, 4});
  return kBits;
}
// 0 = "not set: use the broader knob".
std::vector<Value> optional_bits() {
  std::vector<Value> v = {Value{int64_t{0}}};
  v.insert(v.end(), weight_bit_values().begin(), weight_bit_values().end());
  return v;
}

std::vector<KnobSpec> build_catalogue() {
  using S = std::string;
  std::vector<KnobSpec> cat;
  auto knob = [&](S name, S short_name, KnobType type, Value def, S description, ServingFlag serving,
                  Value (*get)(const LaunchConfig&), void (*set)(LaunchConfig&, const Value&)) -> KnobSpec& {
    KnobSpec k;
    k.name = std::move(name);
    k.short_name = std::move(short_name);
    k.type = type;
    k.default_value = std::move(def);
    k.description = std::move(description);
    k.serving = std::move(serving);
    k.get = get;
    k.set = set;
    cat.push_back(std::move(k));
    return cat.back();
  };
  auto range = [](KnobSpec& k, int64_t low, int64_t high) {
    k.is_range = true;
    k.low = low;
    k.high = high;
  };

  // Weights.
  {
    // The checkpoint holds the bits; the flag only picks the kernel family (gptq_marlin, written by the
    // exporter whenever a weight knob quantises), so a base flag may not set it.
    ServingFlag f = checkpoint("bits of the quantised checkpoint's linears");
    f.flags = {"--quantization"};
    knob("weight_bits", "wbits", KnobType::kInt, int64_t{16},
         "bits of every linear weight except lm_head and the embeddings", f, get_int<&LaunchConfig::weight_bits>,
         set_int<&LaunchConfig::weight_bits>)
        .values = weight_bit_values();
  }
  {
    ServingFlag f = checkpoint("part of the quantised checkpoint");
    // SGLang's gptq_marlin kernels take group sizes -1 (per channel), 32, 64 and 128 only.
    f.cannot_export["256"] = "gptq_marlin (SGLang's Marlin kernels) takes group sizes -1 (per channel), 32, 64, 128";
    knob("weight_group_size", "group", KnobType::kInt, int64_t{128},
         "quantisation group along the input dimension; 0 = one scale per output channel", f,
         get_int<&LaunchConfig::weight_group_size>, set_int<&LaunchConfig::weight_group_size>)
        .values = ints({0, 32, 64, 128, 256});
  }
  knob("attn_weight_bits", "attn_bits", KnobType::kInt, int64_t{0},
       "bits of the attention projections q/k/v/o (and output gates) of every mixer; 0 = same as weight_bits",
       checkpoint("per-module bits belong in the checkpoint's quantisation config (GPTQ 'dynamic')"),
       get_int<&LaunchConfig::attn_weight_bits>, set_int<&LaunchConfig::attn_weight_bits>)
      .values = optional_bits();
  knob("edge_layers_bits", "edge_bits", KnobType::kInt, int64_t{0},
       "bits of the first and last decoder layers; 0 = same as weight_bits",
       checkpoint("per-layer bits belong in the checkpoint's quantisation config (GPTQ 'dynamic')"),
       get_int<&LaunchConfig::edge_layers_bits>, set_int<&LaunchConfig::edge_layers_bits>)
      .values = optional_bits();
  // Per layer type (MiniCPM-SALA's softmax and lightning layers; a Llama model's layers are all softmax).
  const ServingFlag per_module = checkpoint("per-module bits belong in the checkpoint's quantisation config (GPTQ 'dynamic')");
  knob("softmax_attn_bits", "sm_bits", KnobType::kInt, int64_t{0},
       "bits of the softmax-attention layers' q/k/v/o and o_gate; 0 = attn_weight_bits, then weight_bits",
       per_module, get_int<&LaunchConfig::softmax_attn_bits>, set_int<&LaunchConfig::softmax_attn_bits>)
      .values = optional_bits();
  knob("lightning_attn_bits", "la_bits", KnobType::kInt, int64_t{0},
       "bits of the lightning-attention layers' q/k/v/o and z_proj; 0 = attn_weight_bits, then weight_bits",
       per_module, get_int<&LaunchConfig::lightning_attn_bits>, set_int<&LaunchConfig::lightning_attn_bits>)
      .values = optional_bits();
  knob("mlp_bits", "mlp_bits", KnobType::kInt, int64_t{0},
       "bits of every layer's MLP gate/up/down; 0 = weight_bits", per_module,
       get_int<&LaunchConfig::mlp_bits>, set_int<&LaunchConfig::mlp_bits>)
      .values = optional_bits();
  knob("lm_head_bits", "lm_bits", KnobType::kInt, int64_t{16},
       "bits of the lm_head (output projection), groups of weight_group_size; the embeddings stay 16-bit",
       checkpoint("a quantised lm_head belongs in the checkpoint (GPTQ 'lm_head: true')"),
       get_int<&LaunchConfig::lm_head_bits>, set_int<&LaunchConfig::lm_head_bits>)
      .values = weight_bit_values();
  knob("quant_method", "qmethod", KnobType::kString, S("rtn"),
       "how quantised weights are chosen: rtn = round to nearest; gptq = GPTQ error compensation from calibration "
       "activations (the trial's calibration settings)",
       checkpoint("the quantised checkpoint's codes are chosen by this method when it is written"),
       get_string<&LaunchConfig::quant_method>, set_string<&LaunchConfig::quant_method>)
      .values = {S("rtn"), S("gptq")};

  // KV cache.
  {
    ServingFlag f = flag({"--kv-cache-dtype"}, {{"bf16", "auto"}, {"fp16", "auto"}});
    // SGLang's `auto` is the model dtype: fp16 only when the server runs with --dtype float16 (or half).
    f.value_notes["fp16"] = "kv_cache_dtype=fp16 -> --kv-cache-dtype auto: SGLang stores the KV cache in the model "
                            "dtype, which is fp16 only with --dtype float16 (add it to serving.base_args); with a "
                            "bf16 checkpoint and no --dtype the KV cache is bf16";
    const std::string unit_scales = " without --quantization-param-path (a JSON file of KV scaling factors) SGLang "
                                    "runs the FP8 KV cache with unit scales (1.0), which may cost accuracy";
    f.value_notes["fp8_e4m3"] = "kv_cache_dtype=fp8_e4m3:" + unit_scales;
    f.value_notes["fp8_e5m2"] = "kv_cache_dtype=fp8_e5m2:" + unit_scales;
    KnobSpec& k = knob("kv_cache_dtype", "kv", KnobType::kString, S("bf16"), "KV-cache storage dtype", f,
                       get_kv_dtype, set_kv_dtype);
    for (KvCacheDtype d : {KvCacheDtype::kBF16, KvCacheDtype::kFP16, KvCacheDtype::kFP8E4M3, KvCacheDtype::kFP8E5M2})
      k.values.push_back(S(kv_cache_dtype_name(d)));
  }
  knob("kv_page_size", "page", KnobType::kInt, int64_t{16}, "tokens per KV-cache page", flag({"--page-size"}),
       get_int<&LaunchConfig::kv_page_size>, set_int<&LaunchConfig::kv_page_size>)
      .values = ints({8, 16, 32, 64, 128});
  {
    ServingFlag f;
    f.rule = ServingFlag::Rule::kPercent;
    f.flags = {"--mem-fraction-static"};
    KnobSpec& k = knob("mem_fraction_pct", "mem%", KnobType::kInt, int64_t{85},
                       "percent of device memory for weights and KV cache (GPU)", f,
                       get_int<&LaunchConfig::mem_fraction_pct>, set_int<&LaunchConfig::mem_fraction_pct>);
    range(k, 50, 95);
    k.backend = KnobBackend::kCuda;
  }

  // Scheduler.
  range(knob("max_running_requests", "max_run", KnobType::kInt, int64_t{64}, "most sequences decoding at once",
             flag({"--max-running-requests"}), get_int<&LaunchConfig::max_running_requests>,
             set_int<&LaunchConfig::max_running_requests>),
        1, 1024);
  range(knob("max_prefill_tokens", "prefill", KnobType::kInt, int64_t{2048},
             "prefill token budget per step (chunked prefill size)",
             flag({"--chunked-prefill-size", "--max-prefill-tokens"}), get_int<&LaunchConfig::max_prefill_tokens>,
             set_int<&LaunchConfig::max_prefill_tokens>),
        16, 131072);
  range(knob("prefill_max_requests", "pf_reqs", KnobType::kInt, int64_t{0},
             "most requests starting prefill in one step; 0 = no limit", flag({"--prefill-max-requests"}, {{"0", ""}}),
             get_int<&LaunchConfig::prefill_max_requests>, set_int<&LaunchConfig::prefill_max_requests>),
        0, 1024);

  // MiniCPM-SALA mixers (a model without lightning or sparse layers accepts, records and ignores them).
  {
    KnobSpec& k = knob("lightning_state_dtype", "la_state", KnobType::kString, S("fp32"),
                       "storage dtype of the lightning layers' recurrent state (bf16: rounded after every update)",
                       unmapped("no flag of the MiniCPM-SALA serving engine is known to set it; upstream SGLang's "
                                "--mamba-ssm-dtype sets Mamba-style caches, and that the fork keeps lightning "
                                "states there is not verified"),
                       get_state_dtype, set_state_dtype);
    for (StateDtype d : {StateDtype::kFP32, StateDtype::kBF16}) k.values.push_back(S(state_dtype_name(d)));
  }
  knob("lightning_chunk", "la_chunk", KnobType::kInt, int64_t{64},
       "tokens per chunk of the chunked lightning-attention prefill",
       unmapped("soartune lightning prefill chunk; the serving engine's kernel fixes its own"),
       get_int<&LaunchConfig::lightning_chunk>, set_int<&LaunchConfig::lightning_chunk>)
      .values = ints({32, 64, 128});
  // How the race's MiniCPM fork of SGLang sets these (oldzhu/sglang-minicpm, read by hand): its sparse backend
  // (python/sglang/srt/layers/attention/minicpm_backend.py, MiniCPMSparseBackend.__init__) takes topk and
  // window_size from the model's config (the checkpoint's config.json `sparse_config`; upstream SGLang's
  // minicpm backend reads sparse_config["topk"] / ["window_size"] the same way) and has no flag for either
  // (--sparse-topk-scale only multiplies the config's topk); --force-dense-minicpm (server_args.py) makes the
  // model config report no sparse attention and rewrites the minicpm_* attention backend to plain flashinfer,
  // so the softmax layers run dense at every length.
  {
    ServingFlag f;
    f.rule = ServingFlag::Rule::kDisableSwitch;
    f.flags = {"--force-dense-minicpm"};
    f.requires_any_attention_backend = {"minicpm_flashinfer", "minicpm_flashattn"};
    f.note = "only the MiniCPM fork's --force-dense-minicpm turns sparse attention off, and only with its "
             "--attention-backend minicpm_flashinfer or minicpm_flashattn";
    KnobSpec& k = knob("sparse_attention", "sparse", KnobType::kBool, true,
                       "InfLLM-v2 sparse attention of the softmax layers from the model's dense_len on; false = "
                       "dense at every length",
                       f, get_bool<&LaunchConfig::sparse_attention>, set_bool<&LaunchConfig::sparse_attention>);
    k.values = {true, false};
  }
  {
    ServingFlag f;
    f.rule = ServingFlag::Rule::kModelConfig;
    f.config_key = "sparse_config.topk";
    f.note = "the serving engine reads topk from the checkpoint's config.json sparse_config (no flag sets it)";
    knob("sparse_topk", "sp_topk", KnobType::kInt, int64_t{0},
         "key blocks chosen by score in sparse attention (besides initial and local blocks); 0 = the model's "
         "sparse_config topk",
         f, get_int<&LaunchConfig::sparse_topk>, set_int<&LaunchConfig::sparse_topk>)
        .values = ints({0, 16, 32, 64, 128});
  }
  {
    ServingFlag f;
    f.rule = ServingFlag::Rule::kModelConfig;
    f.config_key = "sparse_config.window_size";
    f.note = "the serving engine reads window_size from the checkpoint's config.json sparse_config (no flag sets it)";
    knob("sparse_window", "sp_window", KnobType::kInt, int64_t{0},
         "local window of sparse attention in tokens; 0 = the model's sparse_config window_size",
         f, get_int<&LaunchConfig::sparse_window>, set_int<&LaunchConfig::sparse_window>)
        .values = ints({0, 512, 1024, 2048, 4096});
  }

  // Kernels (CUDA backend).
  {
    KnobSpec& k = knob("gemv_variant", "gemv", KnobType::kString, S("auto"),
                       "decode GEMV tile config (names in kernels/README.md)",
                       unmapped("soartune decode GEMV tile choice"), get_string<&LaunchConfig::gemv_variant>,
                       set_string<&LaunchConfig::gemv_variant>);
    k.values = {S("auto")};
    for (const std::string& name : gemv_variant_names()) k.values.push_back(name);
    k.backend = KnobBackend::kCuda;
  }
  {
    // SGLang's counterpart exists only in its triton attention backend.
    ServingFlag f = flag({"--triton-attention-num-kv-splits"}, {{"0", ""}});
    f.requires_attention_backend = "triton";
    f.note = "--triton-attention-num-kv-splits applies to the triton attention backend only (set "
             "--attention-backend triton in serving.base_args to pass it)";
    KnobSpec& k = knob("decode_kv_splits", "kv_splits", KnobType::kInt, int64_t{0},
                       "split-KV flash-decoding splits; 0 = chosen from the context length", f,
                       get_int<&LaunchConfig::decode_kv_splits>, set_int<&LaunchConfig::decode_kv_splits>);
    for (int splits : kDecodeKvSplits) k.values.push_back(int64_t{splits});
    k.backend = KnobBackend::kCuda;
  }
  {
    KnobSpec& k = knob("prefill_attn_block", "pf_block", KnobType::kInt, int64_t{128},
                       "prefill attention tile (query rows per block)", unmapped("soartune prefill attention tile"),
                       get_int<&LaunchConfig::prefill_attn_block>, set_int<&LaunchConfig::prefill_attn_block>);
    for (int block : kPrefillAttnBlocks) k.values.push_back(int64_t{block});
    k.backend = KnobBackend::kCuda;
  }
  {
    ServingFlag f;
    f.rule = ServingFlag::Rule::kDisableSwitch;
    f.flags = {"--disable-cuda-graph"};
    KnobSpec& k = knob("cuda_graphs", "graphs", KnobType::kBool, true, "capture decode steps as CUDA graphs", f,
                       get_bool<&LaunchConfig::cuda_graphs>, set_bool<&LaunchConfig::cuda_graphs>);
    k.values = {true, false};
    k.backend = KnobBackend::kCuda;
  }
  {
    ServingFlag f = flag({"--cuda-graph-max-bs"});
    f.requires_true = "cuda_graphs";
    f.note = "ignored: CUDA graphs are disabled";
    KnobSpec& k = knob("cuda_graph_max_bs", "graph_bs", KnobType::kInt, int64_t{32}, "largest captured decode batch",
                       f, get_int<&LaunchConfig::cuda_graph_max_bs>, set_int<&LaunchConfig::cuda_graph_max_bs>);
    range(k, 1, 512);
    k.backend = KnobBackend::kCuda;
  }
  return cat;
}

}  // namespace

bool KnobSpec::allows(const Value& v) const {
  switch (type) {
    case KnobType::kBool:
      return std::holds_alternative<bool>(v);
    case KnobType::kInt: {
      const int64_t* i = std::get_if<int64_t>(&v);
      if (!i) return false;
      if (is_range) return *i >= low && *i <= high;
      return std::find(values.begin(), values.end(), v) != values.end();
    }
    case KnobType::kString:
      return std::holds_alternative<std::string>(v) && std::find(values.begin(), values.end(), v) != values.end();
  }
  return false;
}

std::string KnobSpec::allowed_text() const {
  if (is_range) return std::to_string(low) + ".." + std::to_string(high);
  std::string out;
  for (const Value& v : values) out += (out.empty() ? "" : ", ") + to_text(v);
  return out;
}

const std::vector<KnobSpec>& launch_knobs() {
  static const std::vector<KnobSpec> kCatalogue = build_catalogue();
  return kCatalogue;
}

const KnobSpec* find_knob(std::string_view name) {
  for (const KnobSpec& k : launch_knobs())
    if (k.name == name) return &k;
  return nullptr;
}

std::string known_knob_names() {
  std::string out;
  for (const KnobSpec& k : launch_knobs()) out += (out.empty() ? "" : ", ") + k.name;
  return out;
}

const std::vector<Value>& layer_override_bits() { return weight_bit_values(); }

Status disallowed(const KnobSpec& knob, const std::string& value_text, const std::string& field) {
  const std::string shown = value_text.empty() ? "(empty)" : value_text;
  return Status::Invalid(field + ": " + shown + (knob.is_range ? " is not in " : " is not one of ") +
                         knob.allowed_text());
}

Status unknown_knob(const std::string& field) {
  return Status::Invalid(field + ": unknown knob; known knobs: " + known_knob_names());
}

Result<Value> knob_value_from_text(const KnobSpec& knob, const std::string& text, const std::string& field) {
  Value v;
  switch (knob.type) {
    case KnobType::kBool:
      if (text == "true" || text == "True") {
        v = true;
      } else if (text == "false" || text == "False") {
        v = false;
      } else {
        return disallowed(knob, text, field);
      }
      break;
    case KnobType::kInt: {
      int64_t i = 0;
      const char* end = text.data() + text.size();
      auto [ptr, ec] = std::from_chars(text.data(), end, i);
      if (text.empty() || ec != std::errc() || ptr != end) return disallowed(knob, text, field);
      v = i;
      break;
    }
    case KnobType::kString:
      v = text;
      break;
  }
  if (!knob.allows(v)) return disallowed(knob, text, field);
  return v;
}

Status validate_knob(const std::string& name, const Value& v, const std::string& field) {
  const KnobSpec* knob = find_knob(name);
  if (!knob) return unknown_knob(field);
  if (knob->allows(v)) return Status::Ok();
  return disallowed(*knob, to_text(v), field);
}

Status validate_launch(const Config& c, const std::string& field) {
  for (const auto& [name, v] : c) {
    Status s = validate_knob(name, v, field + "." + name);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Result<Config> launch_config_from_text(const std::map<std::string, std::string>& m, const std::string& field) {
  Config c;
  for (const auto& [name, text] : m) {
    const std::string f = field + "." + name;
    const KnobSpec* knob = find_knob(name);
    if (!knob) return unknown_knob(f);
    Result<Value> v = knob_value_from_text(*knob, text, f);
    if (!v.ok()) return v.status();
    c[name] = v.value();
  }
  return c;
}

Result<Config> launch_config_from_yaml(const YAML::Node& node, const std::string& field) {
  if (!node.IsDefined() || node.IsNull()) return Config{};
  if (!node.IsMap()) return Status::Invalid(field + ": must be a mapping of knob name -> value");
  std::map<std::string, std::string> m;
  for (const auto& kv : node) {
    const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : std::string("(not a name)");
    const KnobSpec* knob = find_knob(name);
    if (!knob) return unknown_knob(field + "." + name);
    if (!kv.second.IsScalar())
      return Status::Invalid(field + "." + name + ": must be a single value; allowed: " + knob->allowed_text());
    m[name] = kv.second.Scalar();
  }
  return launch_config_from_text(m, field);
}

std::string serving_export_refusal(const KnobSpec& knob, const Value& value) {
  auto it = knob.serving.cannot_export.find(to_text(value));
  return it == knob.serving.cannot_export.end() ? std::string() : it->second;
}

std::map<std::string, Value> model_config_overrides(const Config& launch) {
  std::map<std::string, Value> out;
  for (const KnobSpec& k : launch_knobs()) {
    if (k.serving.rule != ServingFlag::Rule::kModelConfig) continue;
    auto it = launch.find(k.name);
    if (it != launch.end() && it->second != k.default_value) out[k.serving.config_key] = it->second;
  }
  return out;
}

Config config_of(const LaunchConfig& launch) {
  Config c;
  for (const KnobSpec& k : launch_knobs()) c[k.name] = k.get(launch);
  return c;
}

Config default_config() {
  Config c;
  for (const KnobSpec& k : launch_knobs()) c[k.name] = k.default_value;
  return c;
}

Result<Config> reference_config(const Config& overrides, const std::string& field) {
  Config c = default_config();
  for (const auto& [name, v] : overrides) {
    Status s = validate_knob(name, v, field + "." + name);
    if (!s.ok()) return s;
    c[name] = v;
  }
  return c;
}

}  // namespace soartune::core
