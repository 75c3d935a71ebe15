// A checkpoint is untrusted input: a malformed safetensors header or shard index is an error naming the tensor
// and the field, never an exception, an overflow or a read outside the file. The first cases are inputs the
// fuzzer found (tests/fuzz/safetensors_fuzz.cc, docs/FUZZING.md).
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "engine/safetensors.h"

namespace soartune::engine {
namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path path = fs::temp_directory_path() / ("soartune-st-" + std::to_string(::getpid()) + "-" + std::to_string(next()));
  Dir() { fs::create_directories(path); }
  ~Dir() { fs::remove_all(path); }
  static int next() { static int n = 0; return n++; }
  void put(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
  }
};

// A safetensors file: the 8-byte little-endian header length, the header, then `data`.
std::string file_with(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

Result<Checkpoint> open_single(const Dir& d, const std::string& header, const std::string& data = "") {
  d.put("model.safetensors", file_with(header, data));
  return Checkpoint::open_dir(d.path.string());
}

// Found by the fuzzer: a tensor with no elements (shape [0, 3]) was read with memcpy into a null buffer.
TEST(MalformedSafetensors, AnEmptyTensorReadsAsEmpty) {
  Dir d;
  auto ck = open_single(d, R"({"x":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]}})");
  ASSERT_TRUE(ck.ok()) << ck.status().message;
  std::vector<float> f32{1.f};
  ASSERT_TRUE(ck.value().read_f32("x", {0, 3}, &f32).ok());
  EXPECT_TRUE(f32.empty());
  UninitVector<uint16_t> b16{1};
  bool fp16 = true;
  ASSERT_TRUE(ck.value().read_16("x", {0, 3}, &b16, &fp16).ok());
  EXPECT_TRUE(b16.empty());
}

TEST(MalformedSafetensors, EveryMalformedHeaderIsAnErrorNamingTheField) {
  struct Case { std::string header, expect; };
  const Case cases[] = {
      {"not json", "header is not JSON"},
      {"[1, 2]", "header is not a JSON object"},
      {R"({"x": 1})", "tensor x: must be an object"},
      {R"({"x": {"dtype": 5, "shape": [1], "data_offsets": [0, 4]}})", "tensor x: dtype must be one of F32, F16, BF16, I32"},
      {R"({"x": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", "tensor x: dtype must be one of"},
      {R"({"x": {"dtype": "F32", "data_offsets": [0, 4]}})", "tensor x: shape must be a list"},
      {R"({"x": {"dtype": "F32", "shape": "4", "data_offsets": [0, 4]}})", "tensor x: shape must be a list"},
      {R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "tensor x: shape must be a list of non-negative"},
      {R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", "tensor x: shape must be a list of non-negative"},
      // 2^32 * 2^32 elements: the product overflows int64 before any offset could be checked against it.
      {R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}})", "tensor x: shape has more elements"},
      {R"({"x": {"dtype": "F32", "shape": [1]}})", "tensor x: data_offsets must be a list of two"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": ["0", 4]}})", "tensor x: data_offsets must be a list of two"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", "tensor x: data_offsets must be a list of two"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 18446744073709551615]}})", "tensor x: data_offsets do not match"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "tensor x: data_offsets do not match"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", "tensor x: data_offsets do not match"},
  };
  for (const Case& c : cases) {
    Dir d;
    auto ck = open_single(d, c.header, std::string(4, '\0'));
    ASSERT_FALSE(ck.ok()) << c.header;
    EXPECT_NE(ck.status().message.find(c.expect), std::string::npos) << c.header << " -> " << ck.status().message;
  }
}

// The format does not align tensor data to its element size: a float after one 16-bit value starts 2 bytes off.
TEST(MalformedSafetensors, TensorsNotAlignedToTheirElementSizeReadCorrectly) {
  Dir d;
  const float values[2] = {1.5f, -2.25f};
  std::string data(2, '\0');
  data.append(reinterpret_cast<const char*>(values), 8);
  auto ck = open_single(
      d, R"({"h":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"f":{"dtype":"F32","shape":[2],"data_offsets":[2,10]}})",
      data);
  ASSERT_TRUE(ck.ok()) << ck.status().message;
  std::vector<float> f;
  ASSERT_TRUE(ck.value().read_f32("f", {2}, &f).ok());
  EXPECT_EQ(f, std::vector<float>({1.5f, -2.25f}));
  UninitVector<uint16_t> b16;
  bool fp16 = false;
  ASSERT_TRUE(ck.value().read_16("f", {2}, &b16, &fp16).ok());
  EXPECT_EQ(b16, UninitVector<uint16_t>({0x3FC0, 0xC010}));   // 1.5 and -2.25 in bf16
}

TEST(MalformedSafetensors, AShardIndexNamesOnlyFilesOfItsDirectory) {
  struct Case { std::string index, expect; };
  const Case cases[] = {
      {"{", "model.safetensors.index.json: not JSON"},
      {"[]", "no weight_map object"},
      {R"({"weight_map": {"x": 3}})", "weight_map.x: must be the file name of a shard"},
      {R"({"weight_map": {"x": "../model.safetensors"}})", "weight_map.x: must be the file name of a shard"},
      {R"({"weight_map": {"x": "/etc/hostname"}})", "weight_map.x: must be the file name of a shard"},
      {R"({"weight_map": {"x": ".."}})", "weight_map.x: must be the file name of a shard"},
      {R"({"weight_map": {"x": ""}})", "weight_map.x: must be the file name of a shard"},
  };
  for (const Case& c : cases) {
    Dir d;
    d.put("model.safetensors.index.json", c.index);
    auto ck = Checkpoint::open_dir(d.path.string());
    ASSERT_FALSE(ck.ok()) << c.index;
    EXPECT_NE(ck.status().message.find(c.expect), std::string::npos) << c.index << " -> " << ck.status().message;
  }
}

}  // namespace
}  // namespace soartune::engine
