// Host memory figures from /proc (Linux): what is free for weights, and this process's high-water mark.
#pragma once

#include <cstddef>

namespace soartune::engine {

std::size_t available_memory_bytes();   // MemAvailable; 0 when unknown
std::size_t peak_rss_bytes();           // VmHWM of this process; 0 when unknown

}  // namespace soartune::engine
