// What the kernel timing programs (tests/kernels/*_timing.cu) share: a checked CUDA call that ends the
// program, the CUDA-event median of repeated launches, the device line and the measured copy bandwidth their
// tables are read against, random buffers uploaded as one block repeated, and the fields every paged-attention
// argument struct takes. Header-only: each timing program is one translation unit of its own.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <vector>

#include "kernels/attention_paged.h"
#include "kernels/numeric_formats.h"

// A timing program has nothing to recover: a failed CUDA call prints where and why, and exits 1.
#define CK(stmt)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (stmt);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #stmt, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

namespace soartune::kernels::timing {

// Median of `reps` CUDA-event timings (ms) of f() on the default stream, after 3 untimed warm-up calls.
template <typename F>
float median_ms(F&& f, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// cudaFree of every pointer, each checked.
template <typename... P>
void dev_free(P*... p) {
  for (void* q : {static_cast<void*>(p)...}) CK(cudaFree(q));
}

// Prints "device NAME, N SMs" (every table's first line) and returns the SM count of device 0.
inline int print_device() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, sms);
  return sms;
}

// The copy ceiling a bandwidth-bound kernel is read against: a 2 GiB device-to-device copy, bytes read +
// written, median of 10. Prints its line and returns GB/s.
inline double measure_copy_gbs() {
  const size_t copy_bytes = size_t(2) << 30;
  void *src, *dst;
  CK(cudaMalloc(&src, copy_bytes));
  CK(cudaMalloc(&dst, copy_bytes));
  CK(cudaMemset(src, 1, copy_bytes));
  const float copy_ms = median_ms([&] { CK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); }, 10);
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("copy: %.3f ms for 2 GiB -> %.0f GB/s (read + write)\n", copy_ms, copy_gbs);
  dev_free(src, dst);
  return copy_gbs;
}

// Fills [p, p + bytes) with `block` (block_bytes long) again and again: large random buffers for the cost of
// generating one block on the host.
inline void upload_repeated(void* p, size_t bytes, const void* block, size_t block_bytes) {
  for (size_t off = 0; off < bytes; off += block_bytes)
    CK(cudaMemcpy(static_cast<char*>(p) + off, block, std::min(block_bytes, bytes - off), cudaMemcpyHostToDevice));
}

// n bf16 values drawn from `dist` (seeded by `seed`, rounded to nearest even): one block of up to 8 Mi values,
// repeated over the buffer.
template <typename Dist>
void fill_bf16(void* p, size_t n, Dist dist, uint64_t seed) {
  const size_t block = std::min(n, size_t(8) << 20);
  std::vector<uint16_t> h(block);
  std::mt19937_64 rng(seed);
  for (auto& x : h) x = f32_to_bf16(dist(rng));
  upload_repeated(p, n * 2, h.data(), block * 2);
}

// A device copy of v (at least 16 bytes allocated, so that an empty vector still gives a valid pointer).
template <typename T>
T* dev_copy(const std::vector<T>& v) {
  T* p;
  CK(cudaMalloc(&p, std::max<size_t>(v.size() * sizeof(T), 16)));
  CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// PagedLayer and paged_attention_args: kernels/attention_paged.h.
using kernels::PagedLayer;
using kernels::paged_attention_args;

}  // namespace soartune::kernels::timing
