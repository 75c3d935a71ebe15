#include "core/knob_catalogue.h"

#include <algorithm>
#include <charconv>

namespace soartune::core {

namespace {

KnobSpec enumerated(std::string name, KnobType type, std::vector<Value> values, Value def, std::string description,
                    std::string sglang = "", std::string note = "") {
  KnobSpec k;
  k.name = std::move(name);
  k.type = type;
  k.values = std::move(values);
  k.default_value = std::move(def);
  k.description = std::move(description);
  k.sglang = std::move(sglang);
  k.sglang_note = std::move(note);
  return k;
}

KnobSpec range(std::string name, int64_t low, int64_t high, int64_t def, std::string description,
               std::string sglang = "", std::string note = "") {
  KnobSpec k;
  k.name = std::move(name);
  k.type = KnobType::kInt;
  k.is_range = true;
  k.low = low;
  k.high = high;
  k.default_value = def;
  k.description = std::move(description);
  k.sglang = std::move(sglang);
  k.sglang_note = std::move(note);
  return k;
}

std::vector<Value> ints(std::initializer_list<int64_t> v) { return {v.begin(), v.end()}; }

std::vector<KnobSpec> build_catalogue() {
  using S = std::string;
  std::vector<KnobSpec> k;
  k.push_back(enumerated("weight_bits", KnobType::kInt, ints({16, 8, 4}), int64_t{16},
                         "bits of every linear weight except lm_head and the embeddings", "--quantization",
                         "16 -> none; 8 -> w8a16; 4 -> a gptq-style 4-bit checkpoint"));
  k.push_back(enumerated("weight_group_size", KnobType::kInt, ints({0, 32, 64, 128, 256}), int64_t{128},
                         "quantisation group along the input dimension; 0 = one scale per output channel", "",
                         "part of the quantised checkpoint"));
  k.push_back(enumerated("attn_weight_bits", KnobType::kInt, ints({0, 16, 8, 4}), int64_t{0},
                         "bits of the attention projections q/k/v/o; 0 = same as weight_bits"));
  k.push_back(enumerated("edge_layers_bits", KnobType::kInt, ints({0, 16, 8, 4}), int64_t{0},
                         "bits of the first and last decoder layers; 0 = same as weight_bits"));
  k.push_back(enumerated("lm_head_bits", KnobType::kInt, ints({16, 8, 4}), int64_t{16},
                         "bits of the lm_head (output projection), groups of weight_group_size; the embeddings "
                         "stay 16-bit"));
  k.push_back(enumerated("kv_cache_dtype", KnobType::kString, {S("bf16"), S("fp16"), S("fp8_e4m3"), S("fp8_e5m2")},
                         S("bf16"), "KV-cache storage dtype", "--kv-cache-dtype",
                         "bf16 / fp16 -> auto (the model dtype); fp8_e4m3, fp8_e5m2 as is"));
  k.push_back(enumerated("kv_page_size", KnobType::kInt, ints({8, 16, 32, 64, 128}), int64_t{16},
                         "tokens per KV-cache page", "--page-size"));
  k.push_back(range("mem_fraction_pct", 50, 95, 85, "percent of device memory for weights and KV cache (GPU)",
                    "--mem-fraction-static", "value / 100"));
  k.push_back(range("max_running_requests", 1, 1024, 64, "most sequences decoding at once",
                    "--max-running-requests"));
  k.push_back(range("max_prefill_tokens", 16, 131072, 2048,
                    "prefill token budget per step (chunked prefill size)",
                    "--chunked-prefill-size, --max-prefill-tokens", "the same value for both flags"));
  k.push_back(range("prefill_max_requests", 0, 1024, 0, "most requests starting prefill in one step; 0 = no limit",
                    "--prefill-max-requests", "0 -> flag omitted"));
  {
    KnobSpec g = enumerated("gemv_variant", KnobType::kString, {S("auto")}, S("auto"),
                            "decode GEMV tile config (names in kernels/README.md)");
    g.open_names = true;
    k.push_back(std::move(g));
  }
  k.push_back(enumerated("decode_kv_splits", KnobType::kInt, ints({0, 1, 2, 4, 8, 16, 32, 64, 128}), int64_t{0},
                         "split-KV flash-decoding splits; 0 = chosen from the context length"));
  k.push_back(enumerated("prefill_attn_block", KnobType::kInt, ints({32, 64, 128}), int64_t{128},
                         "prefill attention tile (query rows per block)"));
  k.push_back(enumerated("cuda_graphs", KnobType::kBool, {true, false}, true,
                         "capture decode steps as CUDA graphs", "--disable-cuda-graph",
                         "negated: false -> --disable-cuda-graph"));
  k.push_back(range("cuda_graph_max_bs", 1, 512, 32, "largest captured decode batch", "--cuda-graph-max-bs"));
  return k;
}

bool is_kernel_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'; });
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
    case KnobType::kString: {
      const std::string* s = std::get_if<std::string>(&v);
      if (!s) return false;
      if (std::find(values.begin(), values.end(), v) != values.end()) return true;
      return open_names && is_kernel_name(*s);
    }
  }
  return false;
}

std::string KnobSpec::allowed_text() const {
  if (is_range) return std::to_string(low) + ".." + std::to_string(high);
  std::string out;
  for (const Value& v : values) out += (out.empty() ? "" : ", ") + to_text(v);
  if (open_names) out += ", or a kernel name of [a-z0-9_]";
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

Result<Value> knob_value_from_text(const KnobSpec& knob, const std::string& text, const std::string& field) {
  Value v;
  switch (knob.type) {
    case KnobType::kBool:
      if (text == "true" || text == "True") {
        v = true;
      } else if (text == "false" || text == "False") {
        v = false;
      } else {
        return Status::Invalid(field + ": " + text + " is not one of true, false");
      }
      break;
    case KnobType::kInt: {
      int64_t i = 0;
      const char* end = text.data() + text.size();
      auto [ptr, ec] = std::from_chars(text.data(), end, i);
      if (text.empty() || ec != std::errc() || ptr != end) {
        return Status::Invalid(field + ": " + (text.empty() ? "(empty)" : text) + " is not an integer; allowed: " +
                               knob.allowed_text());
      }
      v = i;
      break;
    }
    case KnobType::kString:
      v = text;
      break;
  }
  if (!knob.allows(v)) {
    const std::string what = knob.is_range ? " is not in " : " is not one of ";
    return Status::Invalid(field + ": " + to_text(v) + what + knob.allowed_text());
  }
  return v;
}

Status validate_knob(const std::string& name, const Value& v, const std::string& field) {
  const KnobSpec* knob = find_knob(name);
  if (!knob) return Status::Invalid(field + ": unknown knob; known knobs: " + known_knob_names());
  if (knob->allows(v)) return Status::Ok();
  // Read the value's text the knob's way, so "16" given to a string knob and "abc" given to an int knob get
  // the same message as any other disallowed value.
  Result<Value> r = knob_value_from_text(*knob, to_text(v), field);
  if (!r.ok()) return r.status();
  return Status::Invalid(field + ": " + to_text(v) + " has the wrong type; allowed: " + knob->allowed_text());
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
    if (!knob) return Status::Invalid(f + ": unknown knob; known knobs: " + known_knob_names());
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
    const std::string name = kv.first.Scalar();
    if (!kv.second.IsScalar()) {
      const KnobSpec* knob = find_knob(name);
      return Status::Invalid(field + "." + name + ": must be a single value" +
                             (knob ? "; allowed: " + knob->allowed_text() : std::string()));
    }
    m[name] = kv.second.Scalar();
  }
  return launch_config_from_text(m, field);
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
