#include "search/sglang_bundle.h"

#include <set>
#include <sstream>

#include "core/knob_catalogue.h"

namespace soartune::search {
namespace {

std::string one_line(const std::string& s) {
  std::string out;
  for (char ch : s) out += (ch == '\n' || ch == '\r') ? ' ' : ch;
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

}  // namespace

bool quantises_weights(const Config& launch) {
  Config c = core::default_config();
  for (const auto& [k, v] : launch) c[k] = v;
  for (const char* k : {"weight_bits", "attn_weight_bits", "edge_layers_bits", "softmax_attn_bits",
                        "lightning_attn_bits", "mlp_bits", "lm_head_bits"}) {
    const int64_t b = std::get<int64_t>(c.at(k));
    if (b != 0 && b != 16) return true;
  }
  return false;
}

Result<BundleText> sglang_bundle(const Config& launch, const ExportSource& source, const ServingSpec& serving,
                                 const BundleSummary& summary, const std::string& checkpoint_dir) {
  Result<SglangMapping> m = sglang_mapping(launch, serving.base_args);
  if (!m.ok()) return m.status();
  BundleText out;
  out.server_args = serving.base_args;
  out.server_args.insert(out.server_args.end(), m.value().args.begin(), m.value().args.end());

  // The whole line against the engine's flag list: every flag known, every value valid, each flag once, and
  // the race's rules (the job spec checked the base flags alone; this checks what the knobs added to them).
  const std::string engine = to_string(serving.engine);
  Result<std::vector<ParsedFlag>> parsed =
      parse_server_args(flag_list(serving.engine), out.server_args, "SGLANG_SERVER_ARGS", engine);
  if (!parsed.ok()) return parsed.status();
  std::set<std::string> seen;
  for (const ParsedFlag& p : parsed.value())
    if (!seen.insert(p.flag).second)
      return Status::Invalid("SGLANG_SERVER_ARGS: " + p.flag + " appears twice (base_args and a tuned knob)");
  if (Status s = check_race_rules(serving.engine, parsed.value(), "SGLANG_SERVER_ARGS"); !s.ok()) return s;

  const std::string args = joined(out.server_args);
  std::string model_line;
  if (!checkpoint_dir.empty())
    model_line = "the quantised checkpoint in ./" + checkpoint_dir + "/ (GPTQ format, written by soartune)";
  else if (source.model.rfind("hf:", 0) == 0)
    model_line = "the original checkpoint " + source.model.substr(3) + " (the config keeps 16-bit weights)";
  else
    model_line = source.model + " is a synthetic test model: there is no checkpoint to serve";

  std::ostringstream env;
  env << "#!/bin/sh\n";
  env << "# soartune submission bundle: job " << one_line(source.job_id) << ", trial " << source.trial << ", engine "
      << engine << "\n";
  env << "# model: " << one_line(model_line) << "\n";
  env << "# Source this file (. ./prepare_env.sh) before starting the server; see README.md.\n";
  // Every token is a validated plain word (base_args are checked at submission, tuned values come from the
  // catalogue), so none needs quoting inside "...".
  env << "export SGLANG_SERVER_ARGS=\"" << args << "\"\n";
  out.prepare_env = env.str();

  std::ostringstream rd;
  rd << "# soartune submission bundle\n\n";
  rd << "Job `" << one_line(source.job_id) << "`, trial " << source.trial << ", model `" << one_line(source.model)
     << "`";
  if (!source.engine_build.empty()) rd << ", measured by soartune " << one_line(source.engine_build);
  rd << ".\n\n";
  rd << "## Serving\n\n";
  rd << "- engine: " << engine << "\n";
  rd << "- model: " << one_line(model_line) << "\n";
  rd << "- `prepare_env.sh` exports `SGLANG_SERVER_ARGS`:\n\n```\n" << args << "\n```\n\n";
  rd << "  base flags (the job's `serving.base_args`): `" << joined(serving.base_args) << "`\n\n";
  rd << "  tuned flags: `" << joined(m.value().args) << "`\n\n";
  rd << "## What was tuned\n\n| knob | value |\n|---|---|\n";
  Config full = core::default_config();
  for (const auto& [k, v] : launch) full[k] = v;
  for (const core::KnobSpec& k : core::launch_knobs()) {
    const Value& v = full.at(k.name);
    rd << "| `" << k.name << "` | " << to_text(v) << (v == k.default_value ? "" : " (changed)") << " |\n";
  }
  rd << "\n## Measured by soartune\n\n";
  for (const std::string& line : summary.measured) rd << "- " << one_line(line) << "\n";
  rd << "\nPredicted official score band: "
     << (summary.predicted_band.empty() ? std::string("none given (run `soartune plan JOB` for the planner's view)")
                                        : one_line(summary.predicted_band))
     << "\n";
  if (!m.value().notes.empty()) {
    rd << "\n## Notes on the mapped flags\n\n";
    for (const std::string& n : m.value().notes) rd << "- " << one_line(n) << "\n";
  }
  if (!m.value().model_config.empty()) {
    rd << "\n## Checkpoint config.json\n\n";
    rd << (checkpoint_dir.empty()
               ? "The config keeps 16-bit weights, so this bundle carries no checkpoint: set these entries in the "
                 "served checkpoint's config.json (the serving engine reads them from there, no flag sets them):\n\n"
               : "Written into ./" + checkpoint_dir + "/config.json (the serving engine reads them from there, no "
                 "flag sets them):\n\n");
    for (const auto& [key, value] : m.value().model_config) rd << "- `" << key << "`: " << to_text(value) << "\n";
  }
  if (!m.value().unmapped.empty()) {
    rd << "\n## Not mapped to a flag (not passed to the server)\n\n";
    for (const std::string& u : m.value().unmapped) rd << "- " << one_line(u) << "\n";
  }
  out.readme = rd.str();
  return out;
}

}  // namespace soartune::search
