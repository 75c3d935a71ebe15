#include "engine/cuda/staged_upload.h"

#include <algorithm>
#include <string>

#include "kernels/cuda_check.cuh"

namespace soartune::engine::cuda {

namespace {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Internal(kernels::cuda_error_message(e, what, __FILE__, __LINE__));
}

}  // namespace

StagedUpload::~StagedUpload() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (int i = 0; i < 2; ++i) {
    if (pinned_) cudaFreeHost(buf_[i]);
    else delete[] buf_[i];
    if (done_[i]) cudaEventDestroy(done_[i]);
  }
  if (stream_) cudaStreamDestroy(stream_);
}

Status StagedUpload::init(std::size_t slice_bytes, int threads) {
  if (stream_) return Status::Precondition("staged upload: already initialised");
  slice_bytes_ = slice_bytes;
  pool_ = std::make_unique<ThreadPool>(threads);
  if (Status s = cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); !s.ok())
    return s;
  for (int i = 0; i < 2; ++i)
    if (Status s = cuda_status(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming), "cudaEventCreate"); !s.ok())
      return s;
  pinned_ = cudaMallocHost(reinterpret_cast<void**>(&buf_[0]), slice_bytes) == cudaSuccess &&
            cudaMallocHost(reinterpret_cast<void**>(&buf_[1]), slice_bytes) == cudaSuccess;
  if (!pinned_) {
    cudaGetLastError();
    if (buf_[0]) cudaFreeHost(buf_[0]);
    buf_[0] = new uint8_t[slice_bytes];
    buf_[1] = new uint8_t[slice_bytes];
  }
  return Status::Ok();
}

Status StagedUpload::copy_rows(void* dst, int rows, std::size_t row_bytes,
                               const std::function<void(int, int, uint8_t*)>& fill) {
  if (!stream_) return Status::Precondition("staged upload: not initialised");
  if (rows <= 0) return Status::Ok();
  if (row_bytes == 0 || row_bytes > slice_bytes_)
    return Status::Internal("staged upload: a row of " + std::to_string(row_bytes) + " bytes does not fit a slice of " +
                            std::to_string(slice_bytes_));
  const int per_slice = int(std::min<std::size_t>(slice_bytes_ / row_bytes, std::size_t(rows)));
  for (int r0 = 0; r0 < rows; r0 += per_slice) {
    const int n = std::min(per_slice, rows - r0);
    const int b = next_;
    next_ ^= 1;
    // The copy that last read this buffer must be done before it is written again.
    if (Status s = cuda_status(cudaEventSynchronize(done_[b]), "cudaEventSynchronize"); !s.ok()) return s;
    uint8_t* buf = buf_[b];
    pool_->parallel_for(n, [&](int a, int e, int) { fill(r0 + a, r0 + e, buf + std::size_t(a) * row_bytes); });
    const std::size_t bytes = std::size_t(n) * row_bytes;
    if (Status s = cuda_status(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + std::size_t(r0) * row_bytes, buf, bytes,
                                               cudaMemcpyHostToDevice, stream_),
                               "cudaMemcpyAsync");
        !s.ok())
      return s;
    if (Status s = cuda_status(cudaEventRecord(done_[b], stream_), "cudaEventRecord"); !s.ok()) return s;
  }
  return Status::Ok();
}

Status StagedUpload::finish() {
  if (!stream_) return Status::Ok();
  return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace soartune::engine::cuda
