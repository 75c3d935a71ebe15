// A hook into CudaModel's step for whoever measures it (soartune-bench): told where each stage of an eager step
// ends on the model's stream, it can record device events there. The engine itself never observes its steps.
#pragma once

#include <cuda_runtime_api.h>

namespace soartune::engine::cuda {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // `stage` ("embed", "rmsnorm", "linear_qkv", ...) has just been enqueued on `stream`.
  virtual void stage_end(const char* stage, cudaStream_t stream) = 0;
};

}  // namespace soartune::engine::cuda
