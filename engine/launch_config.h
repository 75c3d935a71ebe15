// A trial's launch config: the `launch:` mapping and `layer_overrides` of docs/FORMATS.md section 3, typed
// and validated. Every knob of the catalogue (FORMATS.md section 1) is here; the CPU backend ignores the
// CUDA kernel knobs (gemv_variant, decode_kv_splits, prefill_attn_block, cuda_graphs, cuda_graph_max_bs).
#pragma once

#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

#include "core/status.h"

namespace soartune::engine {

enum class KvDtype {
  kBF16, kFP16, kFP8E4M3, kFP8E5M2,
  kFP32,  // engine-internal, not a knob: exact fp32 cache for the reference-implementation tests (CPU only)
};

const char* kv_dtype_name(KvDtype d);          // "bf16", "fp16", "fp8_e4m3", "fp8_e5m2" ("fp32")
int kv_dtype_bytes(KvDtype d);                 // 2, 1 (4 for kFP32)

// Which projections of a layer a weight-bit choice applies to.
enum class ProjKind { kAttn, kMlp };           // attn: q/k/v/o; mlp: gate/up/down

struct LayerOverride {
  int all = 0;                                 // "N": bits for the whole layer; 0 = unset
  int attn = 0;                                // "N.attn"
  int mlp = 0;                                 // "N.mlp"
};

struct LaunchConfig {
  // weights
  int weight_bits = 16;                        // 16, 8, 4
  int weight_group_size = 128;                 // 0, 32, 64, 128, 256 (0 = per output channel)
  int attn_weight_bits = 0;                    // 0, 16, 8, 4 (0 = same as weight_bits)
  int edge_layers_bits = 0;                    // 0, 16, 8, 4 (first and last decoder layer)
  std::map<int, LayerOverride> layer_overrides;
  int lm_head_bits = 16;                       // 16, 8, 4 (group: weight_group_size); embeddings stay 16-bit
  // KV cache
  KvDtype kv_cache_dtype = KvDtype::kBF16;
  int kv_page_size = 16;                       // 8, 16, 32, 64, 128
  int mem_fraction_pct = 85;                   // 50..95 (GPU)
  // scheduler
  int max_running_requests = 64;               // 1..1024
  int max_prefill_tokens = 2048;               // 16..131072
  int prefill_max_requests = 0;                // 0..1024, 0 = no limit
  // kernels (CUDA backend)
  std::string gemv_variant = "auto";           // auto or a name from kernels/README.md (checked by the backend)
  int decode_kv_splits = 0;                    // 0, 1, 2, 4, 8, 16, 32, 64, 128
  int prefill_attn_block = 128;                 // 32, 64, 128
  bool cuda_graphs = true;
  int cuda_graph_max_bs = 32;                  // 1..512

  // Bits of a projection of `layer` (of `num_layers`). Precedence, most specific first:
  // layer_overrides "N.attn"/"N.mlp", then "N", then edge_layers_bits (layers 0 and num_layers-1),
  // then attn_weight_bits (attention projections), then weight_bits.
  int weight_bits_for(int layer, int num_layers, ProjKind kind) const;

  // The reference config of a job: every knob at its catalogue default (16-bit weights, bf16 KV).
  static LaunchConfig reference() { return {}; }

  // Parses `launch` (a mapping knob -> value; missing knobs keep their default, unknown knobs are an
  // error) and `layer_overrides` (a mapping "N" | "N.attn" | "N.mlp" -> 16|8|4; may be null). Errors are
  // kInvalidArgument with the message "launch.<knob>: <value> is not one of <allowed>" (or
  // "layer_overrides.<key>: ...").
  static Result<LaunchConfig> parse(const YAML::Node& launch, const YAML::Node& layer_overrides);

  // The knobs as a YAML mapping (every knob, defaults included), for logs and the result JSON.
  YAML::Node to_yaml() const;
};

}  // namespace soartune::engine
