// Linked into builds without engine/cuda: the factories exist and say why they cannot help.
#include "engine/backend.h"
#include "engine/gptq_quantize.h"

namespace soartune::engine {

Result<std::unique_ptr<Backend>> make_cuda_backend(int /*device_index*/) {
  return Status::Precondition("CUDA backend not built (configure with nvcc available, SOARTUNE_CUDA=AUTO or ON)");
}

Result<std::unique_ptr<GptqSolver>> make_cuda_gptq_solver(int /*device_index*/) {
  return Status::Precondition("CUDA backend not built (configure with nvcc available, SOARTUNE_CUDA=AUTO or ON)");
}

}  // namespace soartune::engine
