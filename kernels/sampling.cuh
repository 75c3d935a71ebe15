// Greedy argmax over each row of fp32 logits [rows][vocab] -> int32 [rows]; ties take the lowest id, NaN is
// never chosen over a number. Bytes per call: rows * vocab * 4. One CTA per row.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace soartune::kernels {

cudaError_t argmax_run(const float* logits, int rows, int vocab, int32_t* out, cudaStream_t stream);

}  // namespace soartune::kernels
