// Host-to-device copies of weights through two pinned staging buffers: the host threads fill one slice of rows
// while the copy engine moves the other, so an upload runs at the link's rate, with no host copy of a whole
// matrix and no copy from pageable memory (which the driver stages through its own small buffer, one thread).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/status.h"
#include "engine/thread_pool.h"

namespace soartune::engine::cuda {

class StagedUpload {
 public:
  StagedUpload() = default;
  ~StagedUpload();
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;

  // Two staging buffers of slice_bytes each (pinned; pageable where pinning fails, slower but the same bytes),
  // a copy stream, and `threads` host threads to fill them.
  Status init(std::size_t slice_bytes, int threads);
  // Writes `rows` rows of row_bytes each to the device at dst: fill(r0, r1, out) writes rows [r0, r1) to out,
  // called from several threads at once on disjoint rows. Returns once every row is filled; the copies may still
  // be running (finish()).
  Status copy_rows(void* dst, int rows, std::size_t row_bytes, const std::function<void(int, int, uint8_t*)>& fill);
  // Waits for every copy.
  Status finish();

 private:
  std::unique_ptr<ThreadPool> pool_;
  uint8_t* buf_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  cudaStream_t stream_ = nullptr;
  std::size_t slice_bytes_ = 0;
  bool pinned_ = false;
  int next_ = 0;
};

}  // namespace soartune::engine::cuda
