// Fuzz target: the quantisation config of a GPTQ checkpoint as `model: hf:DIR` reads it (engine/gptq_format.h
// gptq_zero_offset: config.json quantization_config, else quantize_config.json), beside valid GPTQ tensors. The
// input is config.json; a line "#quantize_config.json" splits off the rest as quantize_config.json (a config
// without quantization_config falls back to that file).
#include <cstdint>
#include <filesystem>
#include <string>

#include "gptq_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soartune::fuzz;
  const ScratchDir& dir = checkpoint_dir("model.safetensors", "gptq_tensors/w4-mlp-w8.safetensors");
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string split = "\n#quantize_config.json\n";
  const std::size_t at = input.find(split);
  dir.write("config.json", input.substr(0, at));
  if (at == std::string::npos) {
    std::error_code ec;
    std::filesystem::remove(dir.file("quantize_config.json"), ec);
  } else {
    dir.write("quantize_config.json", input.substr(at + split.size()));
  }
  load_and_check(dir);
  return 0;
}
