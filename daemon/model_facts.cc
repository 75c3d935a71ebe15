#include "daemon/model_facts.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/synthetic_presets.h"

namespace soartune::daemon {

soartune::Result<ModelFacts> read_model_facts(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) return Status::Invalid("model: cannot read " + path);
  // A parse error's own text quotes the file; ours names it only.
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Invalid("model: " + path + " is not a JSON object");
  const nlohmann::json& c = j;
  ModelFacts f;
  auto layers = c.find("num_hidden_layers");
  if (layers == c.end() || !layers->is_number_integer() || layers->get<int64_t>() < 1 || layers->get<int64_t>() > 100000)
    return Status::Invalid("model: " + path + ": num_hidden_layers is missing or not an integer in 1..100000");
  f.layers = static_cast<int>(layers->get<int64_t>());
  if (auto mp = c.find("max_position_embeddings"); mp != c.end() && mp->is_number_integer() && mp->get<int64_t>() > 0)
    f.max_position = mp->get<int64_t>();
  f.context_source = "max_position_embeddings";
  return f;
}

soartune::Result<ModelFacts> synthetic_model_facts(const std::string& preset) {
  soartune::Result<core::SyntheticPreset> p = core::find_synthetic_preset(preset);
  if (!p.ok()) return p.status();
  ModelFacts f;
  f.layers = p.value().layers;
  f.max_position = p.value().max_position;
  f.context_source = "the synthetic:" + preset + " preset";
  return f;
}

}  // namespace soartune::daemon
