// SwiGLU: out[i][j] = bf16(silu(gu[i][j]) * gu[i][f + j]), gu [T][2f] as the fused gate|up projection writes
// it (fp32, or bf16 when gate_up_bf16), out bf16 [T][f]. interleaved8: gu's columns are in the order of
// interleave_gate_up (kernels/gemv.cuh): gate j at column j / 8 * 16 + j % 8, up j eight columns on; f % 8 == 0.
// Bytes per call: T * f * (8 or 4, + 2).
// FLOPs: ~5 * T * f (plus one exp each).
#pragma once

#include <cuda_runtime_api.h>

namespace soartune::kernels {

cudaError_t swiglu_run(const void* gate_up, void* out_bf16, int tokens, int f, cudaStream_t stream,
                       bool gate_up_bf16 = false, bool interleaved8 = false);

}  // namespace soartune::kernels
