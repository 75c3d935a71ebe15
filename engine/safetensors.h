// Reader (and a small writer, for tests and tools) of the safetensors format: an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the raw little-endian tensor bytes. A checkpoint is one model.safetensors or several shards listed
// by model.safetensors.index.json ({"weight_map": {name: shard file}}).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/uninit_vector.h"

namespace soartune::engine {

enum class TensorDtype { kF32, kF16, kBF16, kI32 };   // I32: GPTQ's packed codes and group indices

struct TensorInfo {
  TensorDtype dtype = TensorDtype::kF32;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// One open .safetensors file; the data stays memory-mapped while the object lives.
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorInfo>& tensors() const { return infos_; }
  const void* data(const std::string& name) const;   // nullptr when absent

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::size_t> offsets_;        // absolute byte offset in the file
};

// A whole checkpoint directory (sharded or single file).
class Checkpoint {
 public:
  static Result<Checkpoint> open_dir(const std::string& dir);
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;             // every tensor, sorted
  const TensorInfo* info(const std::string& name) const;
  // The tensor as fp32 (bf16 / fp16 widened), checking it has `shape`.
  Status read_f32(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out) const;
  // The tensor as bf16 bits, or fp16 bits when stored as fp16 (*is_fp16 set); fp32 is rounded to bf16.
  Status read_16(const std::string& name, const std::vector<int64_t>& shape, UninitVector<uint16_t>* out,
                 bool* is_fp16) const;
  // The tensor's bytes as stored, checking its dtype (the shape is the caller's to check through info()).
  Result<const void*> raw(const std::string& name, TensorDtype dtype) const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, int> where_;                  // tensor -> index in files_
};

struct TensorToWrite {
  std::string name;
  TensorDtype dtype = TensorDtype::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;                         // numel * element size, little-endian
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace soartune::engine
