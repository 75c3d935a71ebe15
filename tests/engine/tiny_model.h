// Access to the shared test models (tiny-llama-bpe4k, tiny-sala) and their reference outputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"

namespace soartune::engine::testing {

inline std::string tiny_model_dir() { return std::string(SOARTUNE_SHARED_DIR) + "/models/tiny-llama-bpe4k"; }
inline bool have_tiny_model() { return std::filesystem::exists(tiny_model_dir() + "/config.json"); }
// The shared random-weight MiniCPM-SALA (official checkpoint format) and its fp32 reference outputs.
inline std::string tiny_sala_dir() { return std::string(SOARTUNE_SHARED_DIR) + "/models/tiny-sala"; }
inline bool have_tiny_sala() { return std::filesystem::exists(tiny_sala_dir() + "/config.json"); }

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// The model `spec` names (load_model's syntax), or empty weights after a test failure naming why.
inline ModelWeights load_checked(const std::string& spec, uint64_t seed = 1) {
  auto r = load_model(spec, seed);
  EXPECT_TRUE(r.ok()) << spec << ": " << r.status().message;
  return r.ok() ? std::move(r).value() : ModelWeights{};
}

// The same, loaded once per test program and shared by the tests that only read it.
inline const ModelWeights& shared_model(const std::string& spec) {
  static std::map<std::string, ModelWeights> loaded;   // a map: references stay valid as it grows
  auto it = loaded.find(spec);
  if (it == loaded.end()) it = loaded.emplace(spec, load_checked(spec)).first;
  return it->second;
}

// A safetensors file read by hand (8-byte little-endian header length, JSON header, data), for reference
// outputs whose dtypes (int64) the checkpoint reader does not take.
struct RawSafetensors {
  nlohmann::json header;
  std::vector<char> data;

  // Tensor `name` as T (the caller checks the dtype in `header`); its shape into `shape` when given.
  template <typename T>
  std::vector<T> tensor(const char* name, std::vector<int64_t>* shape = nullptr) const {
    const auto& t = header.at(name);
    if (shape) *shape = t.at("shape").get<std::vector<int64_t>>();
    const auto off = t.at("data_offsets").get<std::vector<std::size_t>>();
    std::vector<T> out((off[1] - off[0]) / sizeof(T));
    std::memcpy(out.data(), data.data() + off[0], off[1] - off[0]);
    return out;
  }
};

inline RawSafetensors read_safetensors_by_hand(const std::string& path) {
  RawSafetensors f;
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, ' ');
  in.read(header.data(), static_cast<std::streamsize>(n));
  f.header = nlohmann::json::parse(header);
  f.data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return f;
}

// tiny-sala's reference_logits.safetensors: input_ids [4][64] (int64), logits [4][64][vocab] (fp32) and, for prompt
// 0, the residual stream after the embedding and after every layer [layers + 1][64][hidden] (fp32).
struct SalaReferenceLogits {
  std::vector<int64_t> input_ids, ids_shape;
  std::vector<float> logits, residual;
  std::vector<int64_t> logits_shape, residual_shape;
};

inline SalaReferenceLogits read_sala_reference_logits() {
  SalaReferenceLogits r;
  const RawSafetensors f = read_safetensors_by_hand(tiny_sala_dir() + "/reference_logits.safetensors");
  EXPECT_EQ(f.header.at("input_ids").at("dtype"), "I64");
  EXPECT_EQ(f.header.at("logits").at("dtype"), "F32");
  r.input_ids = f.tensor<int64_t>("input_ids", &r.ids_shape);
  r.logits = f.tensor<float>("logits", &r.logits_shape);
  r.residual = f.tensor<float>("residual_stream_prompt0", &r.residual_shape);
  return r;
}

// The shapes the reference must have for a model of config c: 4 prompts of 64 tokens, their logits, and prompt 0's
// residual stream after the embedding and every layer.
inline ::testing::AssertionResult sala_reference_shapes_match(const SalaReferenceLogits& r, const ModelConfig& c) {
  auto text = [](const std::vector<int64_t>& v) {
    std::string s;
    for (int64_t x : v) {
      if (!s.empty()) s += ',';
      s += std::to_string(x);
    }
    return "[" + s + "]";
  };
  const std::vector<int64_t> ids{4, 64}, logits{4, 64, c.vocab}, residual{c.layers + 1, 64, c.hidden};
  if (r.ids_shape != ids || r.logits_shape != logits || r.residual_shape != residual)
    return ::testing::AssertionFailure() << "input_ids " << text(r.ids_shape) << ", logits " << text(r.logits_shape)
                                         << ", residual_stream_prompt0 " << text(r.residual_shape) << "; want "
                                         << text(ids) << ", " << text(logits) << ", " << text(residual);
  return ::testing::AssertionSuccess();
}

// Prompt b of the reference as token ids.
inline std::vector<int32_t> sala_reference_prompt(const SalaReferenceLogits& r, int b) {
  return std::vector<int32_t>(r.input_ids.begin() + b * 64, r.input_ids.begin() + (b + 1) * 64);
}

// max |got - want| over n values, and (scale) max |want|.
inline double max_abs_diff(const float* got, const float* want, std::size_t n, double* scale = nullptr) {
  double d = 0, m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    d = std::max(d, static_cast<double>(std::fabs(got[i] - want[i])));
    m = std::max(m, static_cast<double>(std::fabs(want[i])));
  }
  if (scale) *scale = m;
  return d;
}

}  // namespace soartune::engine::testing

#define SKIP_WITHOUT_TINY_SALA()                                                                  \
  if (!soartune::engine::testing::have_tiny_sala())                                               \
  GTEST_SKIP() << "shared test model not found at " << soartune::engine::testing::tiny_sala_dir() \
               << " (it is not part of a plain clone)"

#define SKIP_WITHOUT_TINY_MODEL()                                                                  \
  if (!soartune::engine::testing::have_tiny_model())                                               \
  GTEST_SKIP() << "shared test model not found at " << soartune::engine::testing::tiny_model_dir() \
               << " (it is not part of a plain clone)"
