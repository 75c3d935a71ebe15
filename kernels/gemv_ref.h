// CPU twin of kernels/gemv.cuh and kernels/gemm.cuh: y[b][n] = sum_k x[b][k] * W[n][k] over weights held in
// the device layout of kernels/weight_format.h (host copies), fp64 accumulation.
#pragma once

#include <cstdint>

#include "kernels/weight_format.h"

namespace soartune::kernels {

// Host view of one linear layer in a device format.
struct HostLinear {
  WeightFormat format = WeightFormat::kBf16;
  int n = 0, k = 0, group = 0;
  const void* w = nullptr;         // weight_bytes(format, n, k)
  const float* scales = nullptr;   // [n][k / group] when quantised
};

// The real value of W[row][col] (16-bit widened, codes times their scale).
float linear_weight_at(const HostLinear& w, int row, int col);

// x [batch][k] fp32 -> y [batch][n] fp32.
void linear_ref(const HostLinear& w, const float* x, int batch, float* y);

}  // namespace soartune::kernels
