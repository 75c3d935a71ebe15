#include "engine/launch_config.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>
#include <vector>

namespace soartune::engine {

const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kFP16: return "fp16";
    case KvDtype::kFP8E4M3: return "fp8_e4m3";
    case KvDtype::kFP8E5M2: return "fp8_e5m2";
    case KvDtype::kFP32: return "fp32";
  }
  return "?";
}

int kv_dtype_bytes(KvDtype d) {
  if (d == KvDtype::kFP32) return 4;
  return (d == KvDtype::kBF16 || d == KvDtype::kFP16) ? 2 : 1;
}

int LaunchConfig::weight_bits_for(int layer, int num_layers, ProjKind kind) const {
  if (auto it = layer_overrides.find(layer); it != layer_overrides.end()) {
    const int specific = kind == ProjKind::kAttn ? it->second.attn : it->second.mlp;
    if (specific) return specific;
    if (it->second.all) return it->second.all;
  }
  if (edge_layers_bits && (layer == 0 || layer == num_layers - 1)) return edge_layers_bits;
  if (kind == ProjKind::kAttn && attn_weight_bits) return attn_weight_bits;
  return weight_bits;
}

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

Status bad(const std::string& field, const std::string& what) { return Status::Invalid(field + ": " + what); }

// Integer knob from a closed set.
Status int_choice(const YAML::Node& n, const std::string& field, const std::vector<int>& allowed, int* out) {
  std::vector<std::string> names;
  for (int a : allowed) names.push_back(std::to_string(a));
  int v = 0;
  if (!n.IsScalar() || !YAML::convert<int>::decode(n, v) ||
      std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    return bad(field, scalar_text(n) + " is not one of " + join(names));
  *out = v;
  return Status::Ok();
}

Status int_range(const YAML::Node& n, const std::string& field, int lo, int hi, int* out) {
  int v = 0;
  if (!n.IsScalar() || !YAML::convert<int>::decode(n, v) || v < lo || v > hi)
    return bad(field, scalar_text(n) + " is not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  *out = v;
  return Status::Ok();
}

Status boolean(const YAML::Node& n, const std::string& field, bool* out) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) return bad(field, scalar_text(n) + " is not one of true, false");
  *out = v;
  return Status::Ok();
}

}  // namespace

Result<LaunchConfig> LaunchConfig::parse(const YAML::Node& launch, const YAML::Node& layer_overrides) {
  LaunchConfig c;
  if (launch && !launch.IsNull() && !launch.IsMap()) return bad("launch", "must be a mapping of knob: value");
  using Parser = std::function<Status(const YAML::Node&, const std::string&)>;
  const std::vector<std::pair<std::string, Parser>> knobs = {
      {"weight_bits", [&](auto& n, auto& f) { return int_choice(n, f, {16, 8, 4}, &c.weight_bits); }},
      {"weight_group_size", [&](auto& n, auto& f) { return int_choice(n, f, {0, 32, 64, 128, 256}, &c.weight_group_size); }},
      {"attn_weight_bits", [&](auto& n, auto& f) { return int_choice(n, f, {0, 16, 8, 4}, &c.attn_weight_bits); }},
      {"edge_layers_bits", [&](auto& n, auto& f) { return int_choice(n, f, {0, 16, 8, 4}, &c.edge_layers_bits); }},
      {"lm_head_bits", [&](auto& n, auto& f) { return int_choice(n, f, {16, 8, 4}, &c.lm_head_bits); }},
      {"kv_cache_dtype", [&](auto& n, auto& f) -> Status {
         const std::string s = n.IsScalar() ? n.Scalar() : scalar_text(n);
         for (KvDtype d : {KvDtype::kBF16, KvDtype::kFP16, KvDtype::kFP8E4M3, KvDtype::kFP8E5M2})
           if (s == kv_dtype_name(d)) { c.kv_cache_dtype = d; return Status::Ok(); }
         return bad(f, s + " is not one of bf16, fp16, fp8_e4m3, fp8_e5m2");
       }},
      {"kv_page_size", [&](auto& n, auto& f) { return int_choice(n, f, {8, 16, 32, 64, 128}, &c.kv_page_size); }},
      {"mem_fraction_pct", [&](auto& n, auto& f) { return int_range(n, f, 50, 95, &c.mem_fraction_pct); }},
      {"max_running_requests", [&](auto& n, auto& f) { return int_range(n, f, 1, 1024, &c.max_running_requests); }},
      {"max_prefill_tokens", [&](auto& n, auto& f) { return int_range(n, f, 16, 131072, &c.max_prefill_tokens); }},
      {"prefill_max_requests", [&](auto& n, auto& f) { return int_range(n, f, 0, 1024, &c.prefill_max_requests); }},
      {"gemv_variant", [&](auto& n, auto& f) -> Status {
         if (!n.IsScalar() || n.Scalar().empty()) return bad(f, scalar_text(n) + " is not a variant name (auto or a name in kernels/README.md)");
         c.gemv_variant = n.Scalar();
         return Status::Ok();
       }},
      {"decode_kv_splits", [&](auto& n, auto& f) { return int_choice(n, f, {0, 1, 2, 4, 8, 16, 32, 64, 128}, &c.decode_kv_splits); }},
      {"prefill_attn_block", [&](auto& n, auto& f) { return int_choice(n, f, {32, 64, 128}, &c.prefill_attn_block); }},
      {"cuda_graphs", [&](auto& n, auto& f) { return boolean(n, f, &c.cuda_graphs); }},
      {"cuda_graph_max_bs", [&](auto& n, auto& f) { return int_range(n, f, 1, 512, &c.cuda_graph_max_bs); }},
  };
  if (launch && launch.IsMap()) {
    for (const auto& kv : launch) {
      const std::string key = kv.first.as<std::string>();
      auto it = std::find_if(knobs.begin(), knobs.end(), [&](auto& k) { return k.first == key; });
      if (it == knobs.end()) {
        std::vector<std::string> names;
        for (auto& k : knobs) names.push_back(k.first);
        return bad("launch." + key, "unknown knob; allowed: " + join(names));
      }
      if (Status s = it->second(kv.second, "launch." + key); !s.ok()) return s;
    }
  }
  if (layer_overrides && !layer_overrides.IsNull()) {
    if (!layer_overrides.IsMap()) return bad("layer_overrides", "must be a mapping of \"N\" | \"N.attn\" | \"N.mlp\" -> bits");
    for (const auto& kv : layer_overrides) {
      const std::string key = kv.first.as<std::string>();
      const std::string field = "layer_overrides." + key;
      const auto dot = key.find('.');
      const std::string idx = key.substr(0, dot);
      const std::string part = dot == std::string::npos ? "" : key.substr(dot + 1);
      int layer = -1;
      if (idx.empty() || idx.size() > 6 || !std::all_of(idx.begin(), idx.end(), ::isdigit) ||
          (part != "" && part != "attn" && part != "mlp"))
        return bad(field, "key is not one of N, N.attn, N.mlp (N a layer index)");
      layer = std::stoi(idx);
      int bits = 0;
      if (Status s = int_choice(kv.second, field, {16, 8, 4}, &bits); !s.ok()) return s;
      LayerOverride& o = c.layer_overrides[layer];
      (part == "attn" ? o.attn : part == "mlp" ? o.mlp : o.all) = bits;
    }
  }
  return c;
}

YAML::Node LaunchConfig::to_yaml() const {
  YAML::Node n;
  n["weight_bits"] = weight_bits;
  n["weight_group_size"] = weight_group_size;
  n["attn_weight_bits"] = attn_weight_bits;
  n["edge_layers_bits"] = edge_layers_bits;
  n["lm_head_bits"] = lm_head_bits;
  n["kv_cache_dtype"] = kv_dtype_name(kv_cache_dtype);
  n["kv_page_size"] = kv_page_size;
  n["mem_fraction_pct"] = mem_fraction_pct;
  n["max_running_requests"] = max_running_requests;
  n["max_prefill_tokens"] = max_prefill_tokens;
  n["prefill_max_requests"] = prefill_max_requests;
  n["gemv_variant"] = gemv_variant;
  n["decode_kv_splits"] = decode_kv_splits;
  n["prefill_attn_block"] = prefill_attn_block;
  n["cuda_graphs"] = cuda_graphs;
  n["cuda_graph_max_bs"] = cuda_graph_max_bs;
  return n;
}

}  // namespace soartune::engine
