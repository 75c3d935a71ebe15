// A private directory for one fuzzer process: the parsers under test take paths (the worker reads its trial
// file, the engine a checkpoint directory), so each input is written to a file here and the real entry point
// reads it back. On tmpfs where there is one, so a write costs microseconds; removed when the process exits.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace soartune::fuzz {

class ScratchDir {
 public:
  ScratchDir() {
    namespace fs = std::filesystem;
    std::string base = fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path().string();
    std::string templ = base + "/soartune-fuzz-XXXXXX";
    if (!mkdtemp(templ.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Replaces `name` with exactly `size` bytes of `data`.
  std::string write(const std::string& name, const uint8_t* data, size_t size) const {
    const std::string p = file(name);
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    return p;
  }
  std::string write(const std::string& name, const std::string& text) const {
    return write(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
  }

 private:
  std::string path_;
};

// The process's scratch directory: made on first use, removed by the exit at the end of a run (a crash leaves it
// behind, beside the input that crashed).
inline ScratchDir& scratch_dir() {
  static ScratchDir dir;
  return dir;
}

}  // namespace soartune::fuzz
