// Launch configs in the forms a real server takes: SGLang server flags, and the environment script race
// packages use to pass them. (The `yaml` format, our own re-runnable trial file, is written by the daemon.)
// Knobs missing from the config take the catalogue defaults, so the exported flags pin the whole config
// rather than falling back on SGLang's own defaults. Knobs with no SGLang equivalent are listed in a trailing
// comment block.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/knob_value.h"
#include "core/status.h"

namespace soartune::search {

enum class ExportFormat { kYaml, kSglangArgs, kEnvScript, kSglangBundle };

// "yaml" (also ""), "sglang-args", "env-script", "sglang-bundle" (a submission directory, search/sglang_bundle.h).
// Error: "<field>: x is not one of yaml, sglang-args, env-script, sglang-bundle".
Result<ExportFormat> parse_export_format(const std::string& text, const std::string& field = "format");
const char* to_string(ExportFormat f);

// Where the config came from; named in the header comment of every export.
struct ExportSource {
  std::string job_id;
  int64_t trial = -1;
  std::string model;                 // "hf:<dir>" or "synthetic:<preset>"
  std::string engine_build;          // optional: the soartune build that measured it
};

struct SglangMapping {
  std::vector<std::string> args;       // flags and values, one token each: {"--kv-cache-dtype", "fp8_e4m3", ...}
  std::vector<std::string> unmapped;   // "knob=value: why", for the trailing comment
  std::vector<std::string> notes;      // caveats of mapped knobs (e.g. the quantised checkpoint they need)
  // Entries the served checkpoint's config.json must hold (dotted key -> value; the catalogue's kModelConfig
  // knobs away from their model's-own default), e.g. {"sparse_config.topk": 32}.
  std::map<std::string, Value> model_config;
};

// The SGLang flags equivalent to `launch` (validated against the catalogue; errors name "launch.<knob>").
// `base_args`, the fixed flags the server also gets (the job's `serving.base_args`), decide the flags that
// depend on them: --triton-attention-num-kv-splits only with the triton attention backend, and the notes on
// fp16 KV (--dtype) and FP8 KV (--quantization-param-path). A value the serving engine cannot take (the
// catalogue's cannot_export, e.g. group size 256 with quantised weights) is an error naming the knob.
Result<SglangMapping> sglang_mapping(const Config& launch, const std::vector<std::string>& base_args = {});

// Header comment, then the flags on one line (POSIX-shell-quoted where needed), then the comment blocks.
// `base_args` (the job's `serving.base_args`, validated at submission) come first, so the line is complete.
Result<std::string> export_sglang_args(const Config& launch, const ExportSource& source,
                                       const std::vector<std::string>& base_args = {});
// A POSIX sh snippet: header comment, `export SGLANG_SERVER_ARGS="<base_args> <tuned flags>"`, then the comment
// blocks.
Result<std::string> export_env_script(const Config& launch, const ExportSource& source,
                                      const std::vector<std::string>& base_args = {});

}  // namespace soartune::search
