// Writes quantised weights as a GPTQ-format Hugging Face checkpoint that SGLang's `gptq` / `gptq_marlin`
// loaders read (and `model: hf:DIR` reads back, engine/model_loader.h):
//   model.safetensors     every quantised linear as qweight / qzeros / scales / g_idx (engine/gptq_format.h);
//                         every other tensor of the source checkpoint copied byte for byte (bf16 stays bf16)
//   config.json           the source's, plus quantization_config
//   quantize_config.json  the same object (AutoGPTQ / GPTQModel read this file)
//   everything else at the top of the source directory (tokenizer, generation_config.json, ...) copied
// quantization_config: quant_method gptq, checkpoint_format gptq (v1), bits (the bits most decoder projections
// have), group_size (-1 per channel), sym true, desc_act false, lm_head (true when the lm_head is quantised),
// and GPTQModel's per-module `dynamic` overrides for mixed precision, one rule per layer part that departs from
// `bits`: "+:model\.layers\.N\.self_attn\..*" {bits: B} re-quantises, "-:model\.layers\.N\.mlp\..*" {} keeps
// 16-bit (the loaders take the first rule whose regex matches the module's name; ours never overlap). A part
// (attention q/k/v/o and the mixer's gate, or MLP gate/up/down) always has one width, so SGLang's fused
// qkv_proj / gate_up_proj see one config.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/knob_value.h"
#include "core/status.h"
#include "engine/weights.h"

namespace soartune::engine {

struct GptqWriteOptions {
  std::string quantizer = "soartune";   // meta.quantizer: who wrote it
  std::string method = "rtn";           // meta.method: how the codes were chosen (rtn | gptq)
  // config.json entries the trial's launch config sets (core::model_config_overrides: dotted key -> value, e.g.
  // "sparse_config.topk" -> 32), so the served checkpoint runs what was measured. An entry whose parent object
  // the source config lacks (no sparse_config on a Llama model) is left out: the knob changed nothing there.
  std::map<std::string, Value> config_overrides;
};

// `w` is the model of `source_dir` after quantize_model(). `out_dir` must not exist or be empty. Returns the
// files written, relative to out_dir. Errors (kInvalidArgument) say what the format cannot express: a config
// that quantises nothing, a tied lm_head quantised apart from the embeddings, widths the packing cannot hold,
// scales outside fp16.
Result<std::vector<std::string>> write_gptq_checkpoint(const ModelWeights& w, const std::string& source_dir,
                                                       const std::string& out_dir, const GptqWriteOptions& options = {});

}  // namespace soartune::engine
