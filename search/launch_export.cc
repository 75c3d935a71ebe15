#include "search/launch_export.h"

#include <cstdio>
#include <sstream>

#include "core/knob_catalogue.h"

namespace soartune::search {
namespace {

int64_t int_of(const Config& c, const std::string& k) { return std::get<int64_t>(c.at(k)); }
const std::string& str_of(const Config& c, const std::string& k) { return std::get<std::string>(c.at(k)); }
bool bool_of(const Config& c, const std::string& k) { return std::get<bool>(c.at(k)); }

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

}  // namespace

Result<ExportFormat> parse_export_format(const std::string& text, const std::string& field) {
  if (text.empty() || text == "yaml") return ExportFormat::kYaml;
  if (text == "sglang-args") return ExportFormat::kSglangArgs;
  if (text == "env-script") return ExportFormat::kEnvScript;
  return Status::Invalid(field + ": " + text + " is not one of yaml, sglang-args, env-script");
}

const char* to_string(ExportFormat f) {
  switch (f) {
    case ExportFormat::kYaml:
      return "yaml";
    case ExportFormat::kSglangArgs:
      return "sglang-args";
    case ExportFormat::kEnvScript:
      return "env-script";
  }
  return "yaml";
}

Result<SglangMapping> sglang_mapping(const Config& launch) {
  if (Status s = core::validate_launch(launch, "launch"); !s.ok()) return s;
  Config c = core::default_config();
  for (const auto& [k, v] : launch) c[k] = v;

  SglangMapping m;
  auto add = [&](const std::string& flag, const std::string& value) {
    m.args.push_back(flag);
    if (!value.empty()) m.args.push_back(value);
  };
  auto unmapped = [&](const std::string& knob, const std::string& why) {
    m.unmapped.push_back(knob + "=" + to_text(c.at(knob)) + ": " + why);
  };

  // Weights. SGLang reads a quantised checkpoint's bits and group size from its config; the flag picks the
  // kernel family. Our 8- and 4-bit weight-only formats correspond to GPTQ checkpoints run with Marlin.
  const int64_t bits = int_of(c, "weight_bits");
  const int64_t group = int_of(c, "weight_group_size");
  const int64_t attn_bits = int_of(c, "attn_weight_bits");
  const int64_t edge_bits = int_of(c, "edge_layers_bits");
  const int64_t lm_bits = int_of(c, "lm_head_bits");
  const bool any_quantised = bits != 16 || (attn_bits != 0 && attn_bits != 16) || (edge_bits != 0 && edge_bits != 16) ||
                             lm_bits != 16;
  if (any_quantised) {
    add("--quantization", "gptq_marlin");
    m.notes.push_back("--quantization gptq_marlin needs a GPTQ checkpoint with " + std::to_string(bits) +
                      "-bit linears (" + (lm_bits == 16 ? std::string("lm_head 16-bit") : "lm_head " + std::to_string(lm_bits) + "-bit") +
                      ", embeddings 16-bit), group size " +
                      (group == 0 ? std::string("per output channel (-1)") : std::to_string(group)) +
                      ", desc_act false");
  }
  if (bits != 16 || group != 128) {
    unmapped("weight_group_size", bits == 16 ? "unused with 16-bit weights" : "part of the quantised checkpoint");
  }
  if (attn_bits != 0)
    unmapped("attn_weight_bits", "per-module bits belong in the checkpoint's quantisation config (GPTQ 'dynamic')");
  if (edge_bits != 0)
    unmapped("edge_layers_bits", "per-layer bits belong in the checkpoint's quantisation config (GPTQ 'dynamic')");
  if (lm_bits != 16)
    unmapped("lm_head_bits", "a quantised lm_head belongs in the checkpoint (GPTQ 'lm_head: true')");

  // KV cache.
  const std::string& kv = str_of(c, "kv_cache_dtype");
  add("--kv-cache-dtype", kv == "bf16" || kv == "fp16" ? "auto" : kv);
  if (kv == "fp16") m.notes.push_back("kv_cache_dtype=fp16 -> auto: SGLang stores the KV cache in the model dtype");
  add("--page-size", std::to_string(int_of(c, "kv_page_size")));
  {
    const int64_t pct = int_of(c, "mem_fraction_pct");
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(pct) / 100.0);
    add("--mem-fraction-static", buf);
  }

  // Scheduling.
  add("--max-running-requests", std::to_string(int_of(c, "max_running_requests")));
  const std::string prefill = std::to_string(int_of(c, "max_prefill_tokens"));
  add("--chunked-prefill-size", prefill);
  add("--max-prefill-tokens", prefill);
  if (const int64_t pmr = int_of(c, "prefill_max_requests"); pmr > 0)
    add("--prefill-max-requests", std::to_string(pmr));

  // CUDA graphs.
  if (bool_of(c, "cuda_graphs")) {
    add("--cuda-graph-max-bs", std::to_string(int_of(c, "cuda_graph_max_bs")));
  } else {
    add("--disable-cuda-graph", "");
    unmapped("cuda_graph_max_bs", "ignored: CUDA graphs are disabled");
  }

  // Our engine's kernel knobs.
  unmapped("gemv_variant", "soartune decode GEMV tile choice");
  unmapped("decode_kv_splits", "soartune split-KV decode attention");
  unmapped("prefill_attn_block", "soartune prefill attention tile");
  return m;
}

Result<std::string> export_sglang_args(const Config& launch, const ExportSource& source) {
  auto m = sglang_mapping(launch);
  if (!m.ok()) return m.status();
  std::ostringstream os;
  os << header(source, "SGLang server arguments");
  os << joined_args(m.value()) << "\n";
  os << footer(m.value());
  return os.str();
}

Result<std::string> export_env_script(const Config& launch, const ExportSource& source) {
  auto m = sglang_mapping(launch);
  if (!m.ok()) return m.status();
  std::ostringstream os;
  os << "#!/bin/sh\n";
  os << header(source, "an environment script (source it before starting the server)");
  // Every token is a validated knob value (digits, dtype names, flags), so none needs escaping inside "...".
  os << "export SGLANG_SERVER_ARGS=\"" << joined_args(m.value()) << "\"\n";
  os << footer(m.value());
  return os.str();
}

}  // namespace soartune::search
