// Shared pieces of the GEMV / GEMM / fused-op kernel tests: fresh seeds, device buffers, bf16 inputs, NaN
// poisoning and the normalised error ||out - ref|| / ||ref||.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/gemv_ref.h"
#include "kernels/numeric_formats.h"
#include "kernels/weight_format.h"

namespace soartune::kernels::test {

#define KT_CUDA(stmt)                                                                                  \
  do {                                                                                                 \
    const cudaError_t e_ = (stmt);                                                                     \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#stmt) + ": " + cudaGetErrorString(e_)); \
  } while (0)

inline bool gpu_present() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

#define KT_SKIP_WITHOUT_GPU(what) \
  if (!::soartune::kernels::test::gpu_present()) GTEST_SKIP() << "no CUDA GPU on this machine: " what " not run"

inline uint64_t new_seed() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Dev(size_t b) : bytes(b ? b : 16) { KT_CUDA(cudaMalloc(&p, bytes)); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
  template <typename T>
  void upload(const std::vector<T>& v) { KT_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  template <typename T>
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    KT_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  void poison() { KT_CUDA(cudaMemset(p, 0xFF, bytes)); }  // NaN in fp32, bf16 and fp16
};

// Random bf16 values in [-a, a]: bits for the device and their exact fp32 values for the twin.
inline void random_bf16(std::mt19937_64& rng, size_t n, float a, std::vector<uint16_t>* bits, std::vector<float>* vals) {
  std::uniform_real_distribution<float> u(-a, a);
  bits->resize(n);
  vals->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*bits)[i] = f32_to_bf16(u(rng));
    (*vals)[i] = bf16_to_f32((*bits)[i]);
  }
}

// ||out - ref|| / ||ref||; infinity when out holds a NaN or infinity.
inline double normalized_error(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// Random weights of an [n][k] layer in a device format (kernels/weight_format.h): codes uniform over the
// format's range, scales uniform in [0.5, 1.5] / qmax; the host bytes and their twin view.
struct Weights {
  std::vector<uint8_t> w;
  std::vector<float> scales;
  HostLinear host;
};

inline Weights make_weights(std::mt19937_64& rng, WeightFormat f, int n, int k, int group) {
  Weights r;
  r.w.resize(weight_bytes(f, n, k));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  if (f == WeightFormat::kBf16 || f == WeightFormat::kFp16) {
    auto* p = reinterpret_cast<uint16_t*>(r.w.data());
    for (int64_t i = 0; i < int64_t(n) * k; ++i) p[i] = f == WeightFormat::kBf16 ? f32_to_bf16(u(rng)) : f32_to_fp16(u(rng));
  } else {
    const int qmax = f == WeightFormat::kInt8 ? 127 : 7;
    std::uniform_int_distribution<int> qd(-qmax, qmax);
    std::vector<int8_t> q(size_t(n) * k);
    for (auto& v : q) v = int8_t(qd(rng));
    if (f == WeightFormat::kInt8) {
      std::memcpy(r.w.data(), q.data(), q.size());
    } else {
      pack_int4_rows(q.data(), n, k, r.w.data());
    }
    std::uniform_real_distribution<float> su(0.5f / qmax, 1.5f / qmax);
    r.scales.resize(size_t(n) * (k / group));
    for (auto& s : r.scales) s = su(rng);
  }
  r.host = {f, n, k, group, r.w.data(), r.scales.empty() ? nullptr : r.scales.data()};
  return r;
}

}  // namespace soartune::kernels::test
