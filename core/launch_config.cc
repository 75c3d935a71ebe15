#include "core/launch_config.h"

#include <algorithm>
#include <charconv>

#include "core/knob_catalogue.h"

namespace soartune {

const char* kv_cache_dtype_name(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kBF16: return "bf16";
    case KvCacheDtype::kFP16: return "fp16";
    case KvCacheDtype::kFP8E4M3: return "fp8_e4m3";
    case KvCacheDtype::kFP8E5M2: return "fp8_e5m2";
    case KvCacheDtype::kFP32: return "fp32";
  }
  return "?";
}

const char* state_dtype_name(StateDtype d) {
  switch (d) {
    case StateDtype::kFP32: return "fp32";
    case StateDtype::kBF16: return "bf16";
  }
  return "?";
}

int kv_cache_dtype_bytes(KvCacheDtype d) {
  if (d == KvCacheDtype::kFP32) return 4;
  return (d == KvCacheDtype::kBF16 || d == KvCacheDtype::kFP16) ? 2 : 1;
}

Result<LayerOverrideKey> parse_layer_override_key(const std::string& key, const std::string& field) {
  const auto dot = key.find('.');
  const std::string idx = key.substr(0, dot);
  const std::string part = dot == std::string::npos ? "" : key.substr(dot + 1);
  LayerOverrideKey k;
  const char* end = idx.data() + idx.size();
  auto [ptr, ec] = std::from_chars(idx.data(), end, k.layer);
  const bool digits = !idx.empty() && std::all_of(idx.begin(), idx.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || ec != std::errc() || ptr != end || (dot != std::string::npos && part != "attn" && part != "mlp"))
    return Status::Invalid(field + ": key is not one of N, N.attn, N.mlp (N a layer index)");
  k.part = part == "attn" ? LayerOverrideKey::Part::kAttn
           : part == "mlp" ? LayerOverrideKey::Part::kMlp
                           : LayerOverrideKey::Part::kAll;
  return k;
}

std::string layer_override_key_text(const LayerOverrideKey& k) {
  const std::string n = std::to_string(k.layer);
  switch (k.part) {
    case LayerOverrideKey::Part::kAttn: return n + ".attn";
    case LayerOverrideKey::Part::kMlp: return n + ".mlp";
    case LayerOverrideKey::Part::kAll: break;
  }
  return n;
}

int LaunchConfig::weight_bits_for(int layer, int num_layers, ProjKind kind) const {
  if (auto it = layer_overrides.find(layer); it != layer_overrides.end()) {
    const int specific = kind == ProjKind::kMlp ? it->second.mlp : it->second.attn;
    if (specific) return specific;
    if (it->second.all) return it->second.all;
  }
  if (edge_layers_bits && (layer == 0 || layer == num_layers - 1)) return edge_layers_bits;
  switch (kind) {
    case ProjKind::kAttn:
      if (softmax_attn_bits) return softmax_attn_bits;
      break;
    case ProjKind::kLightningAttn:
      if (lightning_attn_bits) return lightning_attn_bits;
      break;
    case ProjKind::kMlp:
      if (mlp_bits) return mlp_bits;
      return weight_bits;
  }
  if (attn_weight_bits) return attn_weight_bits;
  return weight_bits;
}

Status LaunchConfig::check_layers(int num_layers) const {
  for (const auto& [layer, o] : layer_overrides) {
    if (layer >= 0 && layer < num_layers) continue;
    return Status::Invalid("layer_overrides." + std::to_string(layer) + ": layer " + std::to_string(layer) +
                           " does not exist; the model has " + std::to_string(num_layers) + " layers (0.." +
                           std::to_string(num_layers - 1) + ")");
  }
  return Status::Ok();
}

LaunchConfig LaunchConfig::reference() {
  LaunchConfig c;
  for (const core::KnobSpec& k : core::launch_knobs()) k.set(c, k.default_value);
  return c;
}

Result<LaunchConfig> LaunchConfig::from_values(const Config& values, const std::string& field) {
  LaunchConfig c = reference();
  for (const auto& [name, v] : values) {
    const core::KnobSpec* k = core::find_knob(name);
    if (!k) return core::unknown_knob(field + "." + name);
    if (!k->allows(v)) return core::disallowed(*k, to_text(v), field + "." + name);
    k->set(c, v);
  }
  return c;
}

Result<LaunchConfig> LaunchConfig::parse(const YAML::Node& launch, const YAML::Node& layer_overrides) {
  Result<Config> values = core::launch_config_from_yaml(launch, "launch");
  if (!values.ok()) return values.status();
  Result<LaunchConfig> parsed = from_values(values.value(), "launch");
  if (!parsed.ok()) return parsed.status();
  LaunchConfig c = std::move(parsed).value();
  if (!layer_overrides.IsDefined() || layer_overrides.IsNull()) return c;
  if (!layer_overrides.IsMap())
    return Status::Invalid("layer_overrides: must be a mapping of \"N\" | \"N.attn\" | \"N.mlp\" -> bits");
  const core::KnobSpec& bits_knob = *core::find_knob("weight_bits");
  for (const auto& kv : layer_overrides) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string("(not a key)");
    const std::string field = "layer_overrides." + key;
    Result<LayerOverrideKey> k = parse_layer_override_key(key, field);
    if (!k.ok()) return k.status();
    if (!kv.second.IsScalar()) return core::disallowed(bits_knob, "(not a single value)", field);
    Result<Value> bits = core::knob_value_from_text(bits_knob, kv.second.Scalar(), field);
    if (!bits.ok()) return bits.status();
    LayerOverride& o = c.layer_overrides[k.value().layer];
    const int b = static_cast<int>(std::get<int64_t>(bits.value()));
    switch (k.value().part) {
      case LayerOverrideKey::Part::kAttn: o.attn = b; break;
      case LayerOverrideKey::Part::kMlp: o.mlp = b; break;
      case LayerOverrideKey::Part::kAll: o.all = b; break;
    }
  }
  return c;
}

Config LaunchConfig::values() const {
  Config out;
  for (const core::KnobSpec& k : core::launch_knobs()) out[k.name] = k.get(*this);
  return out;
}

YAML::Node LaunchConfig::to_yaml() const {
  YAML::Node n(YAML::NodeType::Map);
  for (const core::KnobSpec& k : core::launch_knobs()) {
    const Value v = k.get(*this);
    if (const bool* b = std::get_if<bool>(&v)) n[k.name] = *b;
    else if (const int64_t* i = std::get_if<int64_t>(&v)) n[k.name] = *i;
    else n[k.name] = std::get<std::string>(v);
  }
  return n;
}

YAML::Node LaunchConfig::layer_overrides_yaml() const {
  YAML::Node n;
  for (const auto& [layer, o] : layer_overrides) {
    if (o.all) n[layer_override_key_text({layer, LayerOverrideKey::Part::kAll})] = o.all;
    if (o.attn) n[layer_override_key_text({layer, LayerOverrideKey::Part::kAttn})] = o.attn;
    if (o.mlp) n[layer_override_key_text({layer, LayerOverrideKey::Part::kMlp})] = o.mlp;
  }
  return n;
}

}  // namespace soartune
