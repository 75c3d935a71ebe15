// Fuzz target: the tensors of a GPTQ checkpoint as `model: hf:DIR` reads them (engine/gptq_format.h
// read_gptq_linear: qweight, qzeros, scales and g_idx of each linear, beside the 16-bit tensors), under a valid
// config.json with its quantization_config. The input is the whole model.safetensors file.
#include <cstdint>

#include "gptq_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soartune::fuzz;
  const ScratchDir& dir = checkpoint_dir("config.json", "gptq_config/w4-mlp-w8.json");
  dir.write("model.safetensors", data, size);
  load_and_check(dir);
  return 0;
}
