// Fixed files some targets need beside the input (a model directory, workload files, an accuracy set), at a
// fixed absolute path so that the seed corpora can name them (`model: hf:/tmp/soartune-fuzz/model`). Written
// with write-then-rename, so fuzzer processes started together never see a half-written file.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace soartune::fuzz {

inline constexpr const char* kFixtureDir = "/tmp/soartune-fuzz";

inline void put_fixture(const std::string& relative, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(kFixtureDir) / relative;
  fs::create_directories(p.parent_path());
  const fs::path tmp = p.string() + ".tmp" + std::to_string(getpid());
  std::ofstream(tmp, std::ios::binary | std::ios::trunc) << text;
  fs::rename(tmp, p);
}

inline std::string fixture_path(const std::string& relative) { return std::string(kFixtureDir) + "/" + relative; }

}  // namespace soartune::fuzz
