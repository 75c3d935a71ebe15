// What the daemon learns about a model at submission, from an hf: model's config.json or a synthetic: preset's
// entry in core/synthetic_presets.h (the daemon never loads weights): enough to refuse layer overrides past its
// last layer and workloads longer than its context.
#pragma once

#include <string>

#include "core/status.h"

namespace soartune::daemon {

struct ModelFacts {
  int layers = 0;            // num_hidden_layers
  int64_t max_position = 0;  // max_position_embeddings; 0: the config does not say
  std::string context_source;  // where max_position comes from, for error messages
};

// Reads `<model_dir>/config.json` (the directory already confined to the data roots). kInvalidArgument naming
// "model" when it is not JSON or lacks a positive num_hidden_layers; the message quotes nothing of the file.
soartune::Result<ModelFacts> read_model_facts(const std::string& model_dir);
// The facts of `synthetic:<preset>`; kInvalidArgument naming "model" and the allowed presets for an unknown name.
soartune::Result<ModelFacts> synthetic_model_facts(const std::string& preset);

}  // namespace soartune::daemon
