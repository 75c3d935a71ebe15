// Builds ModelWeights (as the checkpoint holds them: 16-bit, or quantised for a GPTQ checkpoint) from a model spec:
//   hf:<dir>            config.json + safetensors (sharded or single; bf16 / fp16 / fp32), Llama / Qwen2 /
//                       Mistral tensor names; rope_theta or rope_parameters.rope_theta; tied or untied;
//                       MiniCPM-SALA (MiniCPMSALAForCausalLM: mixer_types, lightning_*, gates, muP, sparse_config).
//                       A GPTQ checkpoint (symmetric, desc_act false; engine/gptq_format.h) loads its quantised
//                       linears as quantised weights (bits, group size and codes as stored).
//   synthetic:<preset>  deterministic random bf16 weights of a named shape (core/synthetic_presets.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "core/status.h"
#include "engine/weights.h"

namespace soartune::engine {

// Errors name the field: "model: ..." for the spec, "config.json <key>: ..." for the HF config.
Result<ModelWeights> load_model(const std::string& spec, uint64_t seed = 1);

Result<ModelConfig> read_hf_config(const std::string& dir);
// The shape of a core::synthetic_presets() entry; INVALID_ARGUMENT naming `model` and the presets otherwise.
Result<ModelConfig> synthetic_config(const std::string& preset);

// Host bytes the 16-bit weights of `c` take (what load_model must find free).
std::size_t weight_bytes_16(const ModelConfig& c);

}  // namespace soartune::engine
