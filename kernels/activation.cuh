// SwiGLU: out[i][j] = bf16(silu(gu[i][j]) * gu[i][f + j]), gu [T][2f] as the fused gate|up projection writes
// it (fp32, or bf16 when gate_up_bf16), out bf16 [T][f]. Bytes per call: T * f * (8 or 4, + 2).
// FLOPs: ~5 * T * f (plus one exp each).
#pragma once

#include <cuda_runtime_api.h>

namespace soartune::kernels {

cudaError_t swiglu_run(const void* gate_up, void* out_bf16, int tokens, int f, cudaStream_t stream,
                       bool gate_up_bf16 = false);

}  // namespace soartune::kernels
