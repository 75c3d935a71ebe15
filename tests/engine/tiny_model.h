// Access to the shared test models (tiny-llama-bpe4k, tiny-sala) and their reference outputs.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

}  // namespace soartune::engine::testing

#define SKIP_WITHOUT_TINY_SALA()                                                                  \
  if (!soartune::engine::testing::have_tiny_sala())                                               \
  GTEST_SKIP() << "shared test model not found at " << soartune::engine::testing::tiny_sala_dir() \
               << " (it is not part of a plain clone)"

#define SKIP_WITHOUT_TINY_MODEL()                                                                  \
  if (!soartune::engine::testing::have_tiny_model())                                               \
  GTEST_SKIP() << "shared test model not found at " << soartune::engine::testing::tiny_model_dir() \
               << " (it is not part of a plain clone)"
