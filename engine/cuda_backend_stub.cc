// Linked into builds without engine/cuda: the factory exists and says why it cannot help.
#include "engine/backend.h"

namespace soartune::engine {

Result<std::unique_ptr<Backend>> make_cuda_backend(int /*device_index*/) {
  return Status::Precondition("CUDA backend not built (configure with nvcc available, SOARTUNE_CUDA=AUTO or ON)");
}

}  // namespace soartune::engine
