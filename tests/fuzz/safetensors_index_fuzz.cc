// Fuzz target: model.safetensors.index.json as the engine opens a sharded checkpoint (engine/safetensors.h
// Checkpoint::open_dir). The directory also holds one valid shard, so an index that names it opens it.
#include <cstdint>
#include <vector>

#include "engine/safetensors.h"
#include "scratch_dir.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace soartune::engine;
  TensorToWrite w{"model.norm.weight", TensorDtype::kF32, {4}, std::vector<uint8_t>(16, 0)};
  TensorToWrite e{"model.embed_tokens.weight", TensorDtype::kBF16, {2, 4}, std::vector<uint8_t>(16, 0)};
  const std::string shard = soartune::fuzz::scratch_dir().file("model-00001-of-00001.safetensors");
  if (!write_safetensors(shard, {w, e}).ok()) __builtin_trap();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soartune::engine;
  const soartune::fuzz::ScratchDir& dir = soartune::fuzz::scratch_dir();
  dir.write("model.safetensors.index.json", data, size);
  auto ck = Checkpoint::open_dir(dir.path());
  if (!ck.ok()) return 0;
  for (const std::string& name : ck.value().names()) {
    const TensorInfo* info = ck.value().info(name);
    std::vector<float> f32;
    if (info) (void)ck.value().read_f32(name, info->shape, &f32);
  }
  return 0;
}
