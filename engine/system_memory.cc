#include "engine/system_memory.h"

#include <fstream>
#include <string>

namespace soartune::engine {

namespace {

std::size_t field_kib(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return static_cast<std::size_t>(std::stoull(line.substr(key.size()))) * 1024;
  }
  return 0;
}

}  // namespace

std::size_t available_memory_bytes() { return field_kib("/proc/meminfo", "MemAvailable:"); }
std::size_t peak_rss_bytes() { return field_kib("/proc/self/status", "VmHWM:"); }

}  // namespace soartune::engine
