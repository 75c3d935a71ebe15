#include "engine/gptq_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/gptq_format.h"
#include "engine/safetensors.h"

namespace soartune::engine {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A decoder layer's projections by part, with the checkpoint names the loader reads (model_loader.cc).
struct Part {
  std::string regex;                                      // GPTQModel dynamic key (without +: / -:)
  std::vector<std::pair<std::string, const QuantizedLinear*>> linears;
};

std::vector<Part> layer_parts(const ModelWeights& w) {
  std::vector<Part> parts;
  for (int i = 0; i < static_cast<int>(w.layers.size()); ++i) {
    const LayerWeights& l = w.layers[static_cast<std::size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const bool lightning = w.config.mixer(i) == MixerKind::kLightning;
    Part attn{"model\\.layers\\." + std::to_string(i) + "\\.self_attn\\..*", {}};
    attn.linears = {{p + "self_attn.q_proj", &l.wq}, {p + "self_attn.k_proj", &l.wk}, {p + "self_attn.v_proj", &l.wv},
                    {p + "self_attn.o_proj", &l.wo}};
    if (l.w_out_gate.out > 0) attn.linears.push_back({p + (lightning ? "self_attn.z_proj" : "self_attn.o_gate"), &l.w_out_gate});
    Part mlp{"model\\.layers\\." + std::to_string(i) + "\\.mlp\\..*", {}};
    mlp.linears = {{p + "mlp.gate_proj", &l.w_gate}, {p + "mlp.up_proj", &l.w_up}, {p + "mlp.down_proj", &l.w_down}};
    parts.push_back(std::move(attn));
    parts.push_back(std::move(mlp));
  }
  return parts;
}

int element_size(TensorDtype d) { return d == TensorDtype::kF32 || d == TensorDtype::kI32 ? 4 : 2; }

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Status write_json(const fs::path& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  return out ? Status::Ok() : Status::Internal(path.string() + ": write failed");
}

}  // namespace

Result<std::vector<std::string>> write_gptq_checkpoint(const ModelWeights& w, const std::string& source_dir,
                                                       const std::string& out_dir, const GptqWriteOptions& options) {
  std::error_code ec;
  if (fs::exists(out_dir) && !fs::is_empty(out_dir, ec))
    return Status::Invalid("checkpoint dir: " + out_dir + " exists and is not empty");
  if (fs::exists(out_dir) && fs::equivalent(out_dir, source_dir, ec))
    return Status::Invalid("checkpoint dir: " + out_dir + " is the source checkpoint");

  // Widths per part and the base width: the one most decoder projections have (ties: the lower).
  const std::vector<Part> parts = layer_parts(w);
  std::vector<int> part_bits;
  std::map<int, int> count;
  std::map<std::string, const QuantizedLinear*> quantised;
  int group = -2;
  for (const Part& part : parts) {
    const int b = part.linears.front().second->bits;
    for (const auto& [name, l] : part.linears) {
      if (l->bits != b)
        return Status::Invalid("weights: " + name + " has " + std::to_string(l->bits) + " bits beside " + std::to_string(b) +
                               " in the same part; a GPTQ dynamic rule gives one width per attention or MLP part");
      if (l->bits < 16) {
        quantised[name] = l;
        count[l->bits] += 1;
      }
    }
    part_bits.push_back(b);
  }
  const bool lm_head_q = w.lm_head.bits < 16;
  if (lm_head_q) {
    if (w.config.tie_embeddings)
      return Status::Invalid("launch.lm_head_bits: " + std::to_string(w.lm_head.bits) + " quantises an lm_head tied to the " +
                             "embeddings; the GPTQ format keeps embed_tokens 16-bit and has no separate lm_head tensor to hold it; allowed: 16");
    quantised["lm_head"] = &w.lm_head;
  }
  if (quantised.empty())
    return Status::Invalid("launch.weight_bits: the config quantises no weight (every projection and the lm_head at 16 bits); "
                           "serve the source checkpoint as it is");
  for (const auto& [name, l] : quantised) {
    const int g = l->group_size == 0 ? -1 : l->group_size;
    if (group != -2 && g != group)
      return Status::Invalid("launch.weight_group_size: " + name + " has group " + std::to_string(g) + " beside " + std::to_string(group) +
                             "; one group size per checkpoint");
    group = g;
  }
  int base = lm_head_q ? w.lm_head.bits : 0;
  int best = 0;
  for (const auto& [b, n] : count)
    if (n > best) best = n, base = b;

  json dynamic = json::object();
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (part_bits[k] == 16) dynamic["-:" + parts[k].regex] = json::object();
    else if (part_bits[k] != base) dynamic["+:" + parts[k].regex] = {{"bits", part_bits[k]}};
  }
  if (lm_head_q && w.lm_head.bits != base) dynamic["+:lm_head"] = {{"bits", w.lm_head.bits}};
  json qc = {{"quant_method", "gptq"},  {"checkpoint_format", "gptq"}, {"bits", base}, {"group_size", group},
             {"sym", true},             {"desc_act", false},           {"lm_head", lm_head_q},
             {"true_sequential", true}, {"static_groups", false},
             {"meta", {{"quantizer", json::array({options.quantizer})}, {"method", options.method}}}};
  if (!dynamic.empty()) qc["dynamic"] = dynamic;

  // Tensors: the source's, with every quantised linear's weight replaced by its GPTQ tensors.
  auto ck_or = Checkpoint::open_dir(source_dir);
  if (!ck_or.ok()) return ck_or.status();
  const Checkpoint& ck = ck_or.value();
  std::vector<TensorToWrite> tensors;
  std::size_t replaced = 0;
  for (const std::string& name : ck.names()) {
    const std::string module = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 ? name.substr(0, name.size() - 7) : "";
    auto q = module.empty() ? quantised.end() : quantised.find(module);
    if (q != quantised.end()) {
      auto g = pack_gptq(*q->second, module);
      if (!g.ok()) return g.status();
      const GptqLinear& t = g.value();
      tensors.push_back({module + ".qweight", TensorDtype::kI32, {t.in / t.pack(), t.out}, bytes_of(t.qweight)});
      tensors.push_back({module + ".qzeros", TensorDtype::kI32, {t.groups(), t.out / t.pack()}, bytes_of(t.qzeros)});
      tensors.push_back({module + ".scales", TensorDtype::kF16, {t.groups(), t.out}, bytes_of(t.scales)});
      tensors.push_back({module + ".g_idx", TensorDtype::kI32, {t.in}, bytes_of(t.g_idx)});
      ++replaced;
      continue;
    }
    const TensorInfo& info = *ck.info(name);
    auto p = ck.raw(name, info.dtype);
    if (!p.ok()) return p.status();
    TensorToWrite t{name, info.dtype, info.shape, {}};
    t.bytes.resize(static_cast<std::size_t>(info.numel()) * element_size(info.dtype));
    std::memcpy(t.bytes.data(), p.value(), t.bytes.size());
    tensors.push_back(std::move(t));
  }
  if (replaced != quantised.size())
    return Status::Internal("checkpoint: " + std::to_string(quantised.size() - replaced) + " quantised linears have no weight in " + source_dir);

  json config;
  try {
    std::ifstream in(fs::path(source_dir) / "config.json");
    config = json::parse(in);
  } catch (const std::exception& e) {
    return Status::Invalid("model: " + source_dir + "/config.json is not JSON: " + e.what());
  }
  config["quantization_config"] = qc;
  for (const auto& [key, value] : options.config_overrides) {
    json* node = &config;
    std::string rest = key;
    for (std::size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
      const std::string part = rest.substr(0, dot);
      if (!node->is_object() || !node->contains(part)) {
        node = nullptr;
        break;
      }
      node = &(*node)[part];
    }
    if (!node || !node->is_object()) continue;
    if (const int64_t* i = std::get_if<int64_t>(&value)) (*node)[rest] = *i;
    else if (const bool* b = std::get_if<bool>(&value)) (*node)[rest] = *b;
    else (*node)[rest] = std::get<std::string>(value);
  }

  fs::create_directories(out_dir, ec);
  if (ec) return Status::Internal("checkpoint dir: cannot create " + out_dir + ": " + ec.message());
  std::vector<std::string> files;
  if (Status s = write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors); !s.ok()) return s;
  files.push_back("model.safetensors");
  tensors.clear();
  if (Status s = write_json(fs::path(out_dir) / "config.json", config); !s.ok()) return s;
  files.push_back("config.json");
  if (Status s = write_json(fs::path(out_dir) / "quantize_config.json", qc); !s.ok()) return s;
  files.push_back("quantize_config.json");
  for (const auto& e : fs::directory_iterator(source_dir)) {
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file() || n == "config.json" || n == "quantize_config.json" || n == "model.safetensors.index.json" ||
        e.path().extension() == ".safetensors")
      continue;
    fs::copy_file(e.path(), fs::path(out_dir) / n, ec);
    // Copies keep the source's mode; a read-only source must not give a bundle its owner cannot rewrite.
    if (!ec) fs::permissions(fs::path(out_dir) / n, fs::perms::owner_write, fs::perm_options::add, ec);
    if (ec) return Status::Internal("checkpoint dir: cannot copy " + e.path().string() + ": " + ec.message());
    files.push_back(n);
  }
  return files;
}

}  // namespace soartune::engine
