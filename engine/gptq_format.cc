#include "engine/gptq_format.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/numeric_formats.h"

namespace soartune::engine {

Result<GptqLinear> pack_gptq(const QuantizedLinear& l, const std::string& name) {
  if (l.bits != 4 && l.bits != 8)
    return Status::Invalid("weights: " + name + ": " + std::to_string(l.bits) + "-bit weights have no GPTQ form here; allowed: 4, 8");
  GptqLinear g;
  g.bits = l.bits;
  g.in = l.in;
  g.out = l.out;
  g.group_size = l.group_size == 0 ? -1 : l.group_size;
  const int pack = g.pack();
  if (l.in % pack != 0 || l.out % pack != 0)
    return Status::Invalid("weights: " + name + ": input width " + std::to_string(l.in) + " and output width " + std::to_string(l.out) +
                           " must both be multiples of " + std::to_string(pack) + " to pack " + std::to_string(l.bits) + "-bit GPTQ codes");
  const int64_t groups = g.groups(), gs = g.group_size == -1 ? l.in : g.group_size, in = l.in, out = l.out;
  const int zero = 1 << (l.bits - 1);
  const uint32_t mask = (1u << l.bits) - 1u;
  g.qweight.assign(static_cast<std::size_t>(in / pack * out), 0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const uint32_t code = static_cast<uint32_t>(l.q[static_cast<std::size_t>(o * in + i)] + zero) & mask;
      uint32_t& word = reinterpret_cast<uint32_t&>(g.qweight[static_cast<std::size_t>(i / pack * out + o)]);
      word |= code << ((i % pack) * l.bits);
    }
  // v1 stores zero - 1 (see the header).
  uint32_t zword = 0;
  for (int j = 0; j < pack; ++j) zword |= static_cast<uint32_t>(zero - 1) << (j * l.bits);
  g.qzeros.assign(static_cast<std::size_t>(groups * (out / pack)), static_cast<int32_t>(zword));
  g.scales.resize(static_cast<std::size_t>(groups * out));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < groups; ++k) {
      const float s = l.scales[static_cast<std::size_t>(o * groups + k)];
      const uint16_t h = kernels::f32_to_fp16(s);
      if (kernels::fp16_to_f32(h) != s)
        return Status::Invalid("weights: " + name + ": scale " + std::to_string(s) + " of row " + std::to_string(o) +
                               " is not an fp16 value; the GPTQ format stores fp16 scales");
      g.scales[static_cast<std::size_t>(k * out + o)] = h;
    }
  g.g_idx.resize(static_cast<std::size_t>(in));
  for (int64_t i = 0; i < in; ++i) g.g_idx[static_cast<std::size_t>(i)] = static_cast<int32_t>(g.group_size == -1 ? 0 : i / gs);
  return g;
}

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

Result<const int32_t*> i32(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo* info = ck.info(name);
  if (!info) return Status::NotFound("checkpoint: tensor " + name + " is missing");
  if (info->shape != shape)
    return Status::Invalid("checkpoint: tensor " + name + " has shape " + shape_text(info->shape) + ", expected " + shape_text(shape));
  auto p = ck.raw(name, TensorDtype::kI32);
  if (!p.ok()) return p.status();
  return static_cast<const int32_t*>(p.value());
}

}  // namespace

Status read_gptq_linear(const Checkpoint& ck, const std::string& name, int out, int in, int zero_offset, QuantizedLinear* l) {
  const TensorInfo* qi = ck.info(name + ".qweight");
  const TensorInfo* si = ck.info(name + ".scales");
  if (!qi || !si) return Status::NotFound("checkpoint: tensor " + name + (qi ? ".scales" : ".qweight") + " is missing");
  if (qi->shape.size() != 2 || qi->shape[1] != out || qi->shape[0] <= 0)
    return Status::Invalid("checkpoint: tensor " + name + ".qweight has shape " + shape_text(qi->shape) + ", expected [in * bits / 32, " +
                           std::to_string(out) + "] for input width " + std::to_string(in));
  const int bits = static_cast<int>(qi->shape[0] * 32 / in);
  if (bits != 4 && bits != 8)
    return Status::Invalid("checkpoint: tensor " + name + ".qweight holds " + std::to_string(bits) + "-bit codes; allowed: 4, 8");
  const int pack = 32 / bits;
  if (in % pack != 0 || out % pack != 0)
    return Status::Invalid("checkpoint: " + name + ": widths " + std::to_string(out) + " x " + std::to_string(in) + " are not multiples of " +
                           std::to_string(pack));
  if (si->shape.size() != 2 || si->shape[1] != out || si->shape[0] <= 0 || in % si->shape[0] != 0)
    return Status::Invalid("checkpoint: tensor " + name + ".scales has shape " + shape_text(si->shape) + ", expected [groups, " +
                           std::to_string(out) + "] with groups dividing " + std::to_string(in));
  const int64_t groups = si->shape[0], gs = in / groups;
  auto scales = ck.raw(name + ".scales", TensorDtype::kF16);
  if (!scales.ok()) return scales.status();
  auto qw = i32(ck, name + ".qweight", {in / pack, out});
  if (!qw.ok()) return qw.status();
  auto qz = i32(ck, name + ".qzeros", {groups, out / pack});
  if (!qz.ok()) return qz.status();
  const uint32_t mask = (1u << bits) - 1u;
  const int zero = 1 << (bits - 1);
  for (int64_t k = 0; k < groups * (out / pack); ++k)
    for (int j = 0; j < pack; ++j) {
      const int z = static_cast<int>((static_cast<uint32_t>(qz.value()[k]) >> (j * bits)) & mask) + zero_offset;
      if (z != zero)
        return Status::Invalid("checkpoint: tensor " + name + ".qzeros holds zero point " + std::to_string(z) + "; only symmetric GPTQ " +
                               "(sym true, every zero point " + std::to_string(zero) + ") is supported");
    }
  if (ck.has(name + ".g_idx")) {
    auto gi = i32(ck, name + ".g_idx", {in});
    if (!gi.ok()) return gi.status();
    for (int64_t i = 0; i < in; ++i)
      if (gi.value()[i] != i / gs)
        return Status::Invalid("checkpoint: tensor " + name + ".g_idx[" + std::to_string(i) + "] is " + std::to_string(gi.value()[i]) + ", not " +
                               std::to_string(i / gs) + ": reordered groups (desc_act true) are not supported; allowed: desc_act false");
  }
  l->out = out;
  l->in = in;
  l->bits = bits;
  l->group_size = groups == 1 ? 0 : static_cast<int>(gs);
  l->w16.clear();
  l->q.resize(static_cast<std::size_t>(out) * in);
  l->scales.resize(static_cast<std::size_t>(out * groups));
  const int32_t* q = qw.value();
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) {
      const uint32_t word = static_cast<uint32_t>(q[(i / pack) * out + o]);
      const int code = static_cast<int>((word >> ((i % pack) * bits)) & mask);
      l->q[static_cast<std::size_t>(o * in + i)] = static_cast<int8_t>(code - zero);
    }
  const uint16_t* s = static_cast<const uint16_t*>(scales.value());
  for (int64_t k = 0; k < groups; ++k)
    for (int64_t o = 0; o < out; ++o) l->scales[static_cast<std::size_t>(o * groups + k)] = kernels::fp16_to_f32(s[k * out + o]);
  return Status::Ok();
}

Result<int> gptq_zero_offset(const std::string& dir) {
  namespace fs = std::filesystem;
  nlohmann::json q;
  std::string where;
  try {
    std::ifstream cfg(fs::path(dir) / "config.json");
    if (cfg) {
      const nlohmann::json j = nlohmann::json::parse(cfg);
      if (j.is_object() && j.contains("quantization_config") && !j["quantization_config"].is_null()) {
        q = j["quantization_config"];
        where = "config.json quantization_config";
      }
    }
    if (where.empty()) {
      std::ifstream qc(fs::path(dir) / "quantize_config.json");
      if (qc) {
        q = nlohmann::json::parse(qc);
        where = "quantize_config.json";
      }
    }
  } catch (const std::exception& e) {
    return Status::Invalid("model: " + dir + ": the quantisation config is not JSON: " + e.what());
  }
  if (where.empty()) return 1;   // AutoGPTQ's default: v1
  if (!q.is_object()) return Status::Invalid(where + ": must be a JSON object, not " + std::string(q.type_name()));
  // A string key: absent is its default; any other type is refused by name (the file is untrusted input).
  auto text = [&](const char* key, const std::string& fallback) -> Result<std::string> {
    const auto it = q.find(key);
    if (it == q.end() || it->is_null()) return fallback;
    if (!it->is_string())
      return Status::Invalid(where + "." + key + ": must be a string, not " + std::string(it->type_name()));
    return it->get<std::string>();
  };
  auto method = text("quant_method", "gptq");
  if (!method.ok()) return method.status();
  if (method.value() != "gptq" && method.value() != "gptq_marlin")
    return Status::Invalid(where + ".quant_method: " + method.value() + " is not supported; allowed: gptq, gptq_marlin");
  // What the engine's symmetric 4- / 8-bit representation cannot hold is refused by its key, before any
  // tensor is read (the tensors are checked again as they load: a checkpoint may say less than it holds).
  auto bits_ok = [](const nlohmann::json& b) {
    return b.is_number_integer() && (b.get<int64_t>() == 4 || b.get<int64_t>() == 8);
  };
  if (q.contains("bits") && !bits_ok(q["bits"]))
    return Status::Invalid(where + ".bits: " + q["bits"].dump() + " is not supported; allowed: 4, 8");
  if (q.contains("dynamic") && q["dynamic"].is_object())
    for (const auto& [rule, over] : q["dynamic"].items())
      if (over.is_object() && over.contains("bits") && !bits_ok(over["bits"]))
        return Status::Invalid(where + ".dynamic[\"" + rule + "\"].bits: " + over["bits"].dump() +
                               " is not supported; allowed: 4, 8");
  if (q.contains("sym") && !q["sym"].is_null() && q["sym"] != true)
    return Status::Invalid(where + ".sym: " + q["sym"].dump() + " is not supported (only symmetric zero points); allowed: true");
  auto format = text("checkpoint_format", "gptq");
  if (!format.ok()) return format.status();
  if (format.value() == "gptq") return 1;
  if (format.value() == "gptq_v2") return 0;
  return Status::Invalid(where + ".checkpoint_format: " + format.value() + " is not supported; allowed: gptq, gptq_v2");
}

}  // namespace soartune::engine
