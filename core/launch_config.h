// A trial's launch config, typed: the `launch:` mapping and `layer_overrides` of docs/FORMATS.md section 3.
// The fields are the knobs of the catalogue (core/knob_catalogue.h), which alone says what each field may hold,
// its default and how it reaches the serving engine; reading and writing YAML walk that table, so a knob added
// there is parsed, validated, written and exported without another edit.
#pragma once

#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

#include "core/knob_value.h"
#include "core/status.h"

namespace soartune {

// KV-cache storage dtypes. The knob's values are the first four; kFP32 is engine-internal (an exact cache for
// the reference-implementation tests on the CPU) and never a knob value.
enum class KvCacheDtype { kBF16, kFP16, kFP8E4M3, kFP8E5M2, kFP32 };
const char* kv_cache_dtype_name(KvCacheDtype d);   // the knob's spelling: "bf16", "fp8_e4m3", ... ("fp32")
int kv_cache_dtype_bytes(KvCacheDtype d);          // bytes per stored element

// Storage dtype of a lightning layer's recurrent state (one [heads][d_k][d_v] matrix per sequence slot).
enum class StateDtype { kFP32, kBF16 };
const char* state_dtype_name(StateDtype d);        // the knob's spelling: "fp32", "bf16"

// Which projections of a layer a weight-bit choice applies to. kAttn is a softmax-attention layer's q/k/v/o and
// output gate (every layer of a Llama model); kLightningAttn a lightning layer's q/k/v/o and z_proj gate.
enum class ProjKind { kAttn, kLightningAttn, kMlp };   // mlp: gate/up/down

// One `layer_overrides` entry's target: key "N" (the whole layer), "N.attn" or "N.mlp".
struct LayerOverrideKey {
  int layer = 0;
  enum class Part { kAll, kAttn, kMlp } part = Part::kAll;
};
// The one reader of override keys (the job spec, the trial file and the engine all call it).
// Error: "<field>: key is not one of N, N.attn, N.mlp (N a layer index)".
Result<LayerOverrideKey> parse_layer_override_key(const std::string& key, const std::string& field);
std::string layer_override_key_text(const LayerOverrideKey& k);

struct LayerOverride {
  int all = 0;                                 // "N": bits for the whole layer; 0 = unset
  int attn = 0;                                // "N.attn"
  int mlp = 0;                                 // "N.mlp"
};

// Field comments say what a value means; the allowed values and defaults are the catalogue's alone.
struct LaunchConfig {
  // weights
  int weight_bits = 16;                        // linear weights except lm_head and embeddings
  int weight_group_size = 128;                 // 0 = one scale per output channel
  int attn_weight_bits = 0;                    // attention projections; 0 = same as weight_bits
  int edge_layers_bits = 0;                    // first and last decoder layer; 0 = unset
  int softmax_attn_bits = 0;                   // softmax-attention projections; 0 = unset
  int lightning_attn_bits = 0;                 // lightning-attention projections; 0 = unset
  int mlp_bits = 0;                            // MLP projections; 0 = unset
  std::map<int, LayerOverride> layer_overrides;
  int lm_head_bits = 16;                       // embeddings stay 16-bit
  std::string quant_method = "rtn";            // rtn: round to nearest; gptq: Hessian error compensation
  // KV cache
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kBF16;
  int kv_page_size = 16;                       // tokens per page
  int mem_fraction_pct = 85;                   // GPU memory for weights + KV cache, percent
  // scheduler
  int max_running_requests = 64;
  int max_prefill_tokens = 2048;               // chunked-prefill budget per step
  int prefill_max_requests = 0;                // 0 = no limit
  // MiniCPM-SALA mixers
  StateDtype lightning_state_dtype = StateDtype::kFP32;
  int lightning_chunk = 64;                    // tokens per chunk of the chunked lightning prefill
  bool sparse_attention = true;                // false: softmax layers dense at every length
  int sparse_topk = 0;                         // top-k key blocks; 0 = the model's sparse_config
  int sparse_window = 0;                       // local window in tokens; 0 = the model's sparse_config
  // kernels (CUDA backend)
  std::string gemv_variant = "auto";
  int decode_kv_splits = 0;                    // 0 = chosen from the context length
  int prefill_attn_block = 128;                // query rows per prefill-attention tile
  bool cuda_graphs = true;
  int cuda_graph_max_bs = 32;

  // Bits of a projection of `layer` (of `num_layers`). Precedence, most specific first:
  // layer_overrides "N.attn"/"N.mlp", then "N", then edge_layers_bits (layers 0 and num_layers-1),
  // then the layer type's knob (softmax_attn_bits, lightning_attn_bits, mlp_bits), then attn_weight_bits
  // (attention projections of either mixer), then weight_bits.
  int weight_bits_for(int layer, int num_layers, ProjKind kind) const;

  // Every layer override names a layer of a model of `num_layers` layers. Error:
  // "layer_overrides.<key>: layer N does not exist; the model has L layers (0..L-1)".
  Status check_layers(int num_layers) const;

  // The reference config: every knob at its catalogue default (16-bit weights, bf16 KV).
  static LaunchConfig reference();

  // Parses `launch` (a mapping knob -> scalar; missing knobs keep their default; unknown knobs and disallowed
  // values are errors naming "launch.<knob>" and the allowed values, in the catalogue's one wording) and
  // `layer_overrides` (a mapping "N" | "N.attn" | "N.mlp" -> bits; may be null or absent).
  static Result<LaunchConfig> parse(const YAML::Node& launch, const YAML::Node& layer_overrides);
  // From knob values (what the search proposes and the store keeps); errors name "<field>.<knob>".
  static Result<LaunchConfig> from_values(const Config& values, const std::string& field = "launch");

  // Every knob (defaults included) as its value, in catalogue order: the store's and the exporter's form.
  Config values() const;
  // The knobs as a YAML mapping (every knob), for trial files, logs and the result JSON.
  YAML::Node to_yaml() const;
  // layer_overrides as a YAML mapping of "N" | "N.attn" | "N.mlp" -> bits (null when there are none).
  YAML::Node layer_overrides_yaml() const;
};

}  // namespace soartune
