// Fuzz target: one .safetensors file as the engine opens a single-file checkpoint (engine/safetensors.h
// Checkpoint::open_dir, then every tensor read as the model loader reads it: fp32, 16-bit and raw). The input
// is the whole file: the 8-byte header length, the JSON header and the data.
#include <cstdint>
#include <vector>

#include "engine/safetensors.h"
#include "scratch_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soartune::engine;
  const soartune::fuzz::ScratchDir& dir = soartune::fuzz::scratch_dir();
  dir.write("model.safetensors", data, size);
  auto ck = Checkpoint::open_dir(dir.path());
  if (!ck.ok()) return 0;
  for (const std::string& name : ck.value().names()) {
    const TensorInfo* info = ck.value().info(name);
    if (!info) __builtin_trap();   // names() and info() disagree
    std::vector<float> f32;
    (void)ck.value().read_f32(name, info->shape, &f32);
    UninitVector<uint16_t> b16;
    bool fp16 = false;
    (void)ck.value().read_16(name, info->shape, &b16, &fp16);
    auto raw = ck.value().raw(name, info->dtype);
    if (raw.ok() && info->numel() > 0) {
      // Touch the first and the last byte the tensor claims: ASan reports a read outside the mapping.
      const auto* p = static_cast<const volatile uint8_t*>(raw.value());
      const int64_t bytes = info->numel() * (info->dtype == TensorDtype::kF32 || info->dtype == TensorDtype::kI32 ? 4 : 2);
      (void)p[0];
      (void)p[bytes - 1];
    }
  }
  return 0;
}
