// Device-side helpers shared by the attention kernel tests: checked CUDA calls, GPU detection, device buffers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#define CUDA_CHECK(stmt)                                                                           \
  do {                                                                                             \
    const cudaError_t e_ = (stmt);                                                                 \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#stmt) + ": " + cudaGetErrorString(e_)); \
  } while (0)

namespace soartune::kernels::test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 16)); }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
};

template <typename T>
void upload(DeviceBuf& d, const std::vector<T>& h) {
  CUDA_CHECK(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

}  // namespace soartune::kernels::test
