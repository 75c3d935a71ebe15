// Quantised-weight GEMM for the batches between the GEMV and a prefill: Y[m][n] = X[m][k] W[n][k]^T with W in
// int4 or int8 (kernels/weight_format.h), X bf16, fp32 accumulation on the tensor cores, for m up to
// kQgemmMaxRows. The weights are dequantised tile by tile into shared memory, never to global memory: where the
// GEMM path (gemm.cuh) expands the whole layer to bf16 and hands it to cuBLAS, moving weight_bytes + 4 n k bytes,
// this reads weight_bytes once per 64 rows of X.
//
// x   [m][k] bf16, row i at x + i * x_stride (elements; rows 16-byte aligned)
// y   [m][n] fp32 (bf16 when out_bf16), row i at y + i * y_stride; with accumulate (fp32 only) y += X W^T
// W   DeviceLinear, kInt4 or kInt8, k % 64 == 0, its scale group a multiple of the 16-byte chunk (32 int4 or
//     16 int8 values)
//
// Work: a CTA of 8 warps owns 128 output columns x 64 rows of X and walks k in tiles of 64: each thread loads
// its share of the next tile's codes, scales and X into registers while the warps run the current tile's
// mma.sync m16n8k16 (bf16 in, fp32 accumulate) from shared memory, then dequantises into the other half of a
// double buffer. Each weight value is bf16(code * scale), rounded once, as gemm.cu's expansion writes it, so the
// two paths multiply the same bf16 matrix. Where the tiles alone leave SMs idle (few columns, few rows) k is
// split into `splits` slices whose fp32 partials go to a workspace and are summed in slice order by a second
// kernel: results do not depend on timing.
// Bytes per call: ceil(m / 64) * (weight_bytes + scale_bytes) + ceil(n / 128) * m * k * 2 (X, mostly from L2)
// + m * n * 4 (Y) (+ 2 * splits * m * n * 4 through the workspace). FLOPs: 2 m n k.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/weight_format.h"

namespace soartune::kernels {

inline constexpr int kQgemmMaxRows = 256;

struct QgemmArgs {
  DeviceLinear w;              // kInt4 or kInt8
  const void* x = nullptr;     // device bf16
  void* y = nullptr;           // device fp32 (bf16 when out_bf16)
  int m = 0;                   // rows of X and Y, 1..kQgemmMaxRows
  int64_t x_stride = 0;        // 0 = k
  int64_t y_stride = 0;        // 0 = n
  bool out_bf16 = false;
  bool accumulate = false;     // y += result (fp32 y only)
  int splits = 0;              // k slices: 0 = chosen by qgemm_plan from the shape and the SM count
  float* workspace = nullptr;  // device, qgemm_workspace_bytes() when the plan has more than one slice
  size_t workspace_bytes = 0;
};

struct QgemmPlan {
  int splits = 1;
  int grid_x = 0, grid_y = 0;  // column tiles, row tiles
  int threads = 0;
  size_t smem_bytes = 0;
};

// Bytes of workspace a call with `splits` slices needs (0 for one slice).
size_t qgemm_workspace_bytes(const DeviceLinear& w, int m, int splits);

// The slices qgemm_plan picks for splits = 0 on a device of `sms` SMs: one where the output tiles are at least as
// many as the SMs; else enough for two CTAs an SM, each slice at least 8 k-tiles (512 values of k), at most 16.
int qgemm_auto_splits(const DeviceLinear& w, int m, int sms);

// "" when the weights alone can take this GEMM (format, k, group); else a message naming the field and the allowed
// values. What a caller checks before it plans buffers; qgemm_can_implement checks it too.
std::string qgemm_weights_supported(const DeviceLinear& w);

// "" when args can run (format, shape, group, strides, pointers, epilogue, splits and workspace); else a message
// naming the field and the allowed values.
std::string qgemm_can_implement(const QgemmArgs& args, int sms);

// Fills *plan (resolving splits = 0 for `sms` SMs); returns "" or can_implement's message.
std::string qgemm_plan(const QgemmArgs& args, int sms, QgemmPlan* plan);

// Launches only (one kernel, or two with slices). Returns the launch error, if any.
cudaError_t qgemm_run(const QgemmArgs& args, const QgemmPlan& plan, cudaStream_t stream);

}  // namespace soartune::kernels
