#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/numeric_formats.h"

namespace soartune::engine {

namespace {

int element_size(TensorDtype d) { return d == TensorDtype::kF32 || d == TensorDtype::kI32 ? 4 : 2; }

const char* dtype_name(TensorDtype d) {
  switch (d) {
    case TensorDtype::kF32: return "F32";
    case TensorDtype::kF16: return "F16";
    case TensorDtype::kBF16: return "BF16";
    case TensorDtype::kI32: return "I32";
  }
  return "?";
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < 8) {
    ::close(fd);
    return Status::Invalid(path + ": not a safetensors file (shorter than its header)");
  }
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return Status::Internal(path + ": mmap failed: " + std::strerror(errno));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = map;
  f->map_size_ = size;
  uint64_t header_len = 0;
  std::memcpy(&header_len, map, 8);
  if (header_len > size - 8) return Status::Invalid(path + ": header length " + std::to_string(header_len) + " exceeds file size");
  const char* base = static_cast<const char*>(map);
  // The header is untrusted: parsed without exceptions, and every field checked for its type and range before
  // use, so that a malformed file is an error naming the tensor and the field, never an abort.
  const nlohmann::json header = nlohmann::json::parse(base + 8, base + 8 + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Status::Invalid(path + ": header is not JSON");
  if (!header.is_object()) return Status::Invalid(path + ": header is not a JSON object {name: {dtype, shape, data_offsets}}");
  const std::size_t data_start = 8 + header_len;
  const std::size_t data_size = size - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = path + ": tensor " + it.key();
    const auto& t = it.value();
    if (!t.is_object()) return Status::Invalid(where + ": must be an object {dtype, shape, data_offsets}");
    TensorInfo info;
    const auto dt_it = t.find("dtype");
    const std::string dt = dt_it != t.end() && dt_it->is_string() ? dt_it->get<std::string>() : "";
    if (dt == "F32") info.dtype = TensorDtype::kF32;
    else if (dt == "F16") info.dtype = TensorDtype::kF16;
    else if (dt == "BF16") info.dtype = TensorDtype::kBF16;
    else if (dt == "I32") info.dtype = TensorDtype::kI32;
    else return Status::Invalid(where + ": dtype must be one of F32, F16, BF16, I32");
    const auto shape = t.find("shape");
    if (shape == t.end() || !shape->is_array()) return Status::Invalid(where + ": shape must be a list of non-negative integers");
    // Elements, checked in the order numel() multiplies them, so that numel() of an accepted shape cannot overflow.
    int64_t numel = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return Status::Invalid(where + ": shape must be a list of non-negative integers");
      const int64_t dim = d.get<int64_t>();
      if (__builtin_mul_overflow(numel, dim, &numel)) return Status::Invalid(where + ": shape has more elements than a file can hold");
      info.shape.push_back(dim);
    }
    const auto off = t.find("data_offsets");
    if (off == t.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      return Status::Invalid(where + ": data_offsets must be a list of two non-negative integers [begin, end]");
    const uint64_t b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
    uint64_t bytes = 0;
    if (e < b || e > data_size || __builtin_mul_overflow(static_cast<uint64_t>(numel), element_size(info.dtype), &bytes) ||
        e - b != bytes)
      return Status::Invalid(where + ": data_offsets do not match its shape and dtype");
    f->infos_[it.key()] = info;
    f->offsets_[it.key()] = data_start + b;
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
}

const void* SafetensorsFile::data(const std::string& name) const {
  auto it = offsets_.find(name);
  if (it == offsets_.end()) return nullptr;
  return static_cast<const char*>(map_) + it->second;
}

Result<Checkpoint> Checkpoint::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  Checkpoint c;
  std::vector<std::string> shards;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index, ec)) {
    std::ifstream in(index);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Status::Invalid(index.string() + ": not JSON");
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return Status::Invalid(index.string() + ": no weight_map object");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      // A shard is a file of this directory: a name, not a path that could lead out of it.
      if (!it.value().is_string() || it.value().get<std::string>().empty() ||
          it.value().get<std::string>().find('/') != std::string::npos || it.value().get<std::string>() == "." ||
          it.value().get<std::string>() == "..")
        return Status::Invalid(index.string() + ": weight_map." + it.key() + ": must be the file name of a shard in " + dir);
      const std::string shard = it.value().get<std::string>();
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
  } else if (fs::exists(fs::path(dir) / "model.safetensors", ec)) {
    shards.push_back("model.safetensors");
  } else {
    return Status::NotFound(dir + ": neither model.safetensors nor model.safetensors.index.json");
  }
  for (const auto& shard : shards) {
    auto f = SafetensorsFile::open((fs::path(dir) / shard).string());
    if (!f.ok()) return f.status();
    const int idx = static_cast<int>(c.files_.size());
    c.files_.push_back(std::shared_ptr<SafetensorsFile>(std::move(f).value()));
    for (const auto& [name, info] : c.files_.back()->tensors()) c.where_[name] = idx;
  }
  return c;
}

const TensorInfo* Checkpoint::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return nullptr;
  return &files_[it->second]->tensors().at(name);
}

namespace {

Status check(const Checkpoint& c, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo* i = c.info(name);
  if (!i) return Status::NotFound("checkpoint: tensor " + name + " is missing");
  if (i->shape != shape)
    return Status::Invalid("checkpoint: tensor " + name + " has shape " + shape_text(i->shape) + ", config says " +
                           shape_text(shape));
  if (i->dtype == TensorDtype::kI32)
    return Status::Invalid("checkpoint: tensor " + name + " is I32 where a floating-point tensor (F32, F16, BF16) is expected");
  return Status::Ok();
}

}  // namespace

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> n;
  for (const auto& [name, idx] : where_) n.push_back(name);
  return n;
}

Result<const void*> Checkpoint::raw(const std::string& name, TensorDtype dtype) const {
  const TensorInfo* i = info(name);
  if (!i) return Status::NotFound("checkpoint: tensor " + name + " is missing");
  if (i->dtype != dtype)
    return Status::Invalid("checkpoint: tensor " + name + " is " + dtype_name(i->dtype) + ", expected " + dtype_name(dtype));
  return files_[where_.at(name)]->data(name);
}


namespace {

// Element k of a tensor in the mapping. Loaded byte-wise: a tensor's offset in the file need not be a multiple of
// its element size (the format does not require it), and a misaligned typed load is undefined behaviour.
template <typename T>
T load(const void* p, int64_t k) {
  T v;
  std::memcpy(&v, static_cast<const char*>(p) + k * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

}  // namespace

Status Checkpoint::read_f32(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out) const {
  if (Status s = check(*this, name, shape); !s.ok()) return s;
  const TensorInfo& i = *info(name);
  const void* p = files_[where_.at(name)]->data(name);
  const int64_t n = i.numel();
  out->resize(static_cast<std::size_t>(n));
  if (n == 0) return Status::Ok();
  if (i.dtype == TensorDtype::kF32) {
    std::memcpy(out->data(), p, static_cast<std::size_t>(n) * 4);
  } else {
    for (int64_t k = 0; k < n; ++k) {
      const uint16_t h = load<uint16_t>(p, k);
      (*out)[k] = i.dtype == TensorDtype::kBF16 ? kernels::bf16_to_f32(h) : kernels::fp16_to_f32(h);
    }
  }
  return Status::Ok();
}

Status Checkpoint::read_16(const std::string& name, const std::vector<int64_t>& shape, UninitVector<uint16_t>* out,
                           bool* is_fp16) const {
  if (Status s = check(*this, name, shape); !s.ok()) return s;
  const TensorInfo& i = *info(name);
  const void* p = files_[where_.at(name)]->data(name);
  const int64_t n = i.numel();
  out->resize(static_cast<std::size_t>(n));
  *is_fp16 = i.dtype == TensorDtype::kF16;
  if (n == 0) return Status::Ok();
  if (i.dtype == TensorDtype::kF32) {
    for (int64_t k = 0; k < n; ++k) (*out)[k] = kernels::f32_to_bf16(load<float>(p, k));
  } else {
    std::memcpy(out->data(), p, static_cast<std::size_t>(n) * 2);
  }
  return Status::Ok();
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (t.bytes.size() != static_cast<std::size_t>(n) * element_size(t.dtype))
      return Status::Invalid("write_safetensors: " + t.name + ": byte count does not match shape and dtype");
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) return Status::Internal(path + ": cannot write");
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  return out ? Status::Ok() : Status::Internal(path + ": write failed");
}

}  // namespace soartune::engine
