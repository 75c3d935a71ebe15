// Fuzz target: a Hugging Face config.json as the worker reads it (engine/model_loader.h): read_hf_config, the
// worker's memory estimate from it (parameter_count), then load_model("hf:<dir>") itself, which reads the
// config again and stops at the missing checkpoint.
#include <cstdint>

#include "engine/model_loader.h"
#include "scratch_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soartune::engine;
  const soartune::fuzz::ScratchDir& dir = soartune::fuzz::scratch_dir();
  dir.write("config.json", data, size);
  auto cfg = read_hf_config(dir.path());
  if (cfg.ok()) {
    (void)cfg.value().parameter_count();
    (void)load_model("hf:" + dir.path());
  }
  return 0;
}
