// The named shapes of `model: synthetic:<preset>` (deterministic random weights, engine/model_loader.cc). One
// table read by the engine, which builds the model from it, and by the daemon, which checks a job against it at
// submission (preset name, layer overrides, workload lengths) without ever loading the engine.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace soartune::core {

struct SyntheticPreset {
  std::string name;            // what follows "synthetic:"
  int hidden = 0;              // residual stream width
  int intermediate = 0;        // SwiGLU hidden width
  int layers = 0;              // decoder layers
  int heads = 0;               // query heads
  int kv_heads = 0;            // key/value heads
  int head_dim = 0;            // per-head width
  int vocab = 0;               // embedding rows
  float rms_eps = 1e-5f;       // RMSNorm epsilon
  float rope_theta = 10000.f;  // RoPE base
  int max_position = 0;        // the context in tokens (input_len + output_len of a request must fit)
  // Empty: a Llama decoder. Otherwise a MiniCPM-SALA hybrid whose softmax layers are these indices and whose
  // other layers are lightning attention.
  std::vector<int> sala_softmax_layers;
};

const std::vector<SyntheticPreset>& synthetic_presets();

// The preset of that name; INVALID_ARGUMENT naming `model` and the allowed names otherwise.
soartune::Result<SyntheticPreset> find_synthetic_preset(const std::string& name);

}  // namespace soartune::core
