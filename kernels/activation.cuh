// SwiGLU: out[i][j] = bf16(silu(gu[i][j]) * gu[i][f + j]), gu fp32 [T][2f] as the fused gate|up projection
// writes it, out bf16 [T][f]. Bytes per call: T * f * (8 + 2). FLOPs: ~5 * T * f (plus one exp each).
#pragma once

#include <cuda_runtime_api.h>

namespace soartune::kernels {

cudaError_t swiglu_run(const float* gate_up, void* out_bf16, int tokens, int f, cudaStream_t stream);

}  // namespace soartune::kernels
