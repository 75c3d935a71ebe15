#include "search/launch_export.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string_view>

#include "core/knob_catalogue.h"

namespace soartune::search {
namespace {

int64_t int_of(const Config& c, const std::string& k) { return std::get<int64_t>(c.at(k)); }

// Comment text on one line: no newlines can escape the comment.
std::string one_line(const std::string& s) {
  std::string out;
  for (char ch : s) out += (ch == '\n' || ch == '\r') ? ' ' : ch;
  return out;
}

bool shell_safe(const std::string& s) {
  if (s.empty()) return false;
  for (char ch : s) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                    ch == '-' || ch == '.' || ch == '/' || ch == ':' || ch == '=' || ch == '+' || ch == ',';
    if (!ok) return false;
  }
  return true;
}

std::string shell_quote(const std::string& s) {
  if (shell_safe(s)) return s;
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string joined_args(const SglangMapping& m) {
  std::string out;
  for (const std::string& a : m.args) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

std::string header(const ExportSource& src, const char* what) {
  std::ostringstream os;
  os << "# soartune launch config exported as " << what << "\n";
  os << "# source: job " << (src.job_id.empty() ? "(none)" : one_line(src.job_id)) << ", trial ";
  if (src.trial >= 0)
    os << src.trial;
  else
    os << "(none)";
  os << "\n";
  if (!src.model.empty()) {
    os << "# model: " << one_line(src.model);
    if (src.model.rfind("hf:", 0) == 0)
      os << " (serve it with --model-path " << one_line(src.model.substr(3)) << ")";
    else if (src.model.rfind("synthetic:", 0) == 0)
      os << " (a synthetic test model: no real checkpoint to serve)";
    os << "\n";
  }
  if (!src.engine_build.empty()) os << "# measured by soartune " << one_line(src.engine_build) << "\n";
  return os.str();
}

std::string footer(const SglangMapping& m) {
  std::ostringstream os;
  if (!m.notes.empty()) {
    os << "# Notes on the mapped flags:\n";
    for (const std::string& n : m.notes) os << "#   " << one_line(n) << "\n";
  }
  if (!m.unmapped.empty()) {
    os << "# Knobs without an SGLang equivalent (not passed to the server):\n";
    for (const std::string& u : m.unmapped) os << "#   " << one_line(u) << "\n";
  }
  return os.str();
}

// The value of `flag` among argv tokens ("--flag v" or "--flag=v"); empty when absent.
std::string arg_value(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind(flag + "=", 0) == 0) return args[i].substr(flag.size() + 1);
  }
  return "";
}

// The attention backend SGLang decodes with: --decode-attention-backend over --attention-backend.
std::string decode_backend(const std::vector<std::string>& base_args) {
  std::string b = arg_value(base_args, "--decode-attention-backend");
  return b.empty() ? arg_value(base_args, "--attention-backend") : b;
}

// A value note the base flags already answer: fp16 KV with --dtype float16, FP8 KV with its scales file.
bool note_settled(const std::string& knob, const std::string& value, const std::vector<std::string>& base_args) {
  if (knob != "kv_cache_dtype") return false;
  if (value == "fp16") {
    const std::string dtype = arg_value(base_args, "--dtype");
    return dtype == "float16" || dtype == "half";
  }
  return !arg_value(base_args, "--quantization-param-path").empty();
}

}  // namespace

Result<ExportFormat> parse_export_format(const std::string& text, const std::string& field) {
  if (text.empty() || text == "yaml") return ExportFormat::kYaml;
  if (text == "sglang-args") return ExportFormat::kSglangArgs;
  if (text == "env-script") return ExportFormat::kEnvScript;
  if (text == "sglang-bundle") return ExportFormat::kSglangBundle;
  return Status::Invalid(field + ": " + text + " is not one of yaml, sglang-args, env-script, sglang-bundle");
}

const char* to_string(ExportFormat f) {
  switch (f) {
    case ExportFormat::kYaml:
      return "yaml";
    case ExportFormat::kSglangArgs:
      return "sglang-args";
    case ExportFormat::kEnvScript:
      return "env-script";
    case ExportFormat::kSglangBundle:
      return "sglang-bundle";
  }
  return "yaml";
}

Result<SglangMapping> sglang_mapping(const Config& launch, const std::vector<std::string>& base_args) {
  if (Status s = core::validate_launch(launch, "launch"); !s.ok()) return s;
  Config c = core::default_config();
  for (const auto& [k, v] : launch) c[k] = v;

  SglangMapping m;
  auto unmapped = [&](const core::KnobSpec& k, const std::string& why) {
    m.unmapped.push_back(k.name + "=" + to_text(c.at(k.name)) + ": " + why);
  };

  // Weights. SGLang reads a quantised checkpoint's bits and group size from its config; the flag picks the
  // kernel family. Our 8- and 4-bit weight-only formats correspond to GPTQ checkpoints run with Marlin, so any
  // checkpoint knob away from 16 bits asks for one.
  const int64_t bits = int_of(c, "weight_bits");
  const int64_t group = int_of(c, "weight_group_size");
  const int64_t lm_bits = int_of(c, "lm_head_bits");
  bool any_quantised = false, per_module = false;
  for (const char* k : {"weight_bits", "attn_weight_bits", "edge_layers_bits", "softmax_attn_bits",
                        "lightning_attn_bits", "mlp_bits", "lm_head_bits"}) {
    const int64_t b = int_of(c, k);
    any_quantised = any_quantised || (b != 0 && b != 16);
    per_module = per_module || (std::string_view(k) != "weight_bits" && std::string_view(k) != "lm_head_bits" && b != 0);
  }
  if (any_quantised) {
    const core::KnobSpec& g = *core::find_knob("weight_group_size");
    if (std::string why = core::serving_export_refusal(g, c.at(g.name)); !why.empty())
      return Status::Invalid("launch.weight_group_size: " + to_text(c.at(g.name)) + " cannot be served: " + why);
    m.args.push_back("--quantization");
    m.args.push_back("gptq_marlin");
    m.notes.push_back("--quantization gptq_marlin needs a GPTQ checkpoint with " + std::to_string(bits) +
                      "-bit linears" + (per_module ? std::string(" except the per-module bits listed below") : "") +
                      " (" + (lm_bits == 16 ? std::string("lm_head 16-bit") : "lm_head " + std::to_string(lm_bits) + "-bit") +
                      ", embeddings 16-bit), group size " +
                      (group == 0 ? std::string("per output channel (-1)") : std::to_string(group)) +
                      ", desc_act false");
  }

  // Every other knob as its catalogue entry says.
  for (const core::KnobSpec& k : core::launch_knobs()) {
    const core::ServingFlag& f = k.serving;
    const Value& v = c.at(k.name);
    const std::string text = to_text(v);
    switch (f.rule) {
      case core::ServingFlag::Rule::kNone:
        unmapped(k, f.note);
        break;
      case core::ServingFlag::Rule::kCheckpoint:
        // Listed where it departs from a plain 16-bit checkpoint.
        if (k.name == "weight_group_size") {
          if (bits != 16 || group != 128) unmapped(k, bits == 16 ? "unused with 16-bit weights" : f.note);
        } else if (k.name != "weight_bits" && v != k.default_value) {
          unmapped(k, f.note);
        }
        break;
      case core::ServingFlag::Rule::kValue: {
        if (!f.requires_true.empty() && !std::get<bool>(c.at(f.requires_true))) {
          unmapped(k, f.note);
          break;
        }
        auto mapped = f.value_map.find(text);
        const std::string arg = mapped == f.value_map.end() ? text : mapped->second;
        if (arg.empty()) break;   // the value the serving engine takes when the flag is absent
        if (!f.requires_attention_backend.empty() && decode_backend(base_args) != f.requires_attention_backend) {
          unmapped(k, f.note);
          break;
        }
        for (const std::string& flag : f.flags) {
          m.args.push_back(flag);
          m.args.push_back(arg);
        }
        break;
      }
      case core::ServingFlag::Rule::kPercent: {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(std::get<int64_t>(v)) / 100.0);
        for (const std::string& flag : f.flags) {
          m.args.push_back(flag);
          m.args.push_back(buf);
        }
        break;
      }
      case core::ServingFlag::Rule::kDisableSwitch: {
        if (std::get<bool>(v)) break;
        const auto& backends = f.requires_any_attention_backend;
        if (!backends.empty() &&
            std::find(backends.begin(), backends.end(), decode_backend(base_args)) == backends.end()) {
          unmapped(k, f.note);
          break;
        }
        for (const std::string& flag : f.flags) m.args.push_back(flag);
        break;
      }
      case core::ServingFlag::Rule::kModelConfig:
        if (v == k.default_value) break;   // the model's own value
        m.model_config[f.config_key] = v;
        m.notes.push_back(k.name + "=" + text + ": config.json " + f.config_key + " = " + text +
                          " in the served checkpoint (" + f.note + ")");
        break;
    }
    if (auto note = f.value_notes.find(text); note != f.value_notes.end() && !note_settled(k.name, text, base_args))
      m.notes.push_back(note->second);
  }
  return m;
}

Result<std::string> export_sglang_args(const Config& launch, const ExportSource& source,
                                       const std::vector<std::string>& base_args) {
  auto m = sglang_mapping(launch, base_args);
  if (!m.ok()) return m.status();
  m.value().args.insert(m.value().args.begin(), base_args.begin(), base_args.end());
  std::ostringstream os;
  os << header(source, "SGLang server arguments");
  os << joined_args(m.value()) << "\n";
  os << footer(m.value());
  return os.str();
}

Result<std::string> export_env_script(const Config& launch, const ExportSource& source,
                                      const std::vector<std::string>& base_args) {
  auto m = sglang_mapping(launch, base_args);
  if (!m.ok()) return m.status();
  m.value().args.insert(m.value().args.begin(), base_args.begin(), base_args.end());
  std::ostringstream os;
  os << "#!/bin/sh\n";
  os << header(source, "an environment script (source it before starting the server)");
  // Every token is a validated knob value (digits, dtype names, flags), so none needs escaping inside "...".
  os << "export SGLANG_SERVER_ARGS=\"" << joined_args(m.value()) << "\"\n";
  os << footer(m.value());
  return os.str();
}

}  // namespace soartune::search
