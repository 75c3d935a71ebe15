#include "core/synthetic_presets.h"

namespace soartune::core {

const std::vector<SyntheticPreset>& synthetic_presets() {
  static const std::vector<SyntheticPreset> p = {
      // A whole demo trial runs in seconds on two cores.
      {"tiny", 256, 768, 4, 4, 2, 64, 2048, 1e-5f, 10000.f, 4096, {}},
      // The shared test model's shape (tiny-llama-bpe4k).
      {"small", 512, 1536, 6, 4, 2, 128, 4096, 1e-5f, 10000.f, 4096, {}},
      {"llama3-8b", 4096, 14336, 32, 32, 8, 128, 128256, 1e-5f, 500000.f, 131072, {}},
      // The MiniCPM-SALA release (openbmb/MiniCPM-SALA config.json: hidden 4096, 32 x 128 heads, 2 KV heads,
      // dim_model_base 256), for timing at scale.
      {"minicpm-sala-9b", 4096, 16384, 32, 32, 2, 128, 73448, 1e-6f, 10000.f, 524288, {0, 9, 16, 17, 22, 29, 30, 31}},
      // The shared tiny-sala test model's shape (hidden 256, dim_model_base 16), for quick hybrid-model trials.
      {"tiny-sala", 256, 768, 8, 4, 2, 64, 4096, 1e-6f, 10000.f, 16384, {0, 4, 7}},
  };
  return p;
}

soartune::Result<SyntheticPreset> find_synthetic_preset(const std::string& name) {
  std::string allowed;
  for (const SyntheticPreset& p : synthetic_presets()) {
    if (p.name == name) return p;
    allowed += (allowed.empty() ? "" : ", ") + p.name;
  }
  return Status::Invalid("model: synthetic preset '" + name + "' is not one of " + allowed);
}

}  // namespace soartune::core
