#include "kernels/gptq.cuh"

#include <cuda_fp16.h>

#include "kernels/numeric_formats.h"

namespace soartune::kernels {
namespace {

__global__ void hessian_to_f64_kernel(const float* h32, double* h64, int n) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(n) * n) return;
  const int i = int(idx % n), j = int(idx / n);   // h64[i + j * n]
  h64[idx] = i >= j ? double(h32[idx]) : double(h32[j + int64_t(i) * n]);
}

constexpr int kDampThreads = 1024;

__global__ void __launch_bounds__(kDampThreads) dead_and_damp_kernel(double* h, uint8_t* dead, int n, double damp_pct) {
  __shared__ double part[kDampThreads / 32];
  double s = 0;
  for (int i = threadIdx.x; i < n; i += kDampThreads) {
    double& d = h[i + int64_t(i) * n];
    dead[i] = d == 0.0;
    if (d == 0.0) d = 1.0;
    s += d;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kDampThreads / 32; ++w) total += part[w];
  const double damp = damp_pct / 100.0 * (total / n);
  for (int i = threadIdx.x; i < n; i += kDampThreads) h[i + int64_t(i) * n] += damp;
}

constexpr int kTile = 32;

// A 32 x 32 tile through shared memory: reads along w16's rows, writes along w's columns.
__global__ void weights_f64_kernel(const uint16_t* w16, bool bf16, const uint8_t* dead, double* w, int out, int in) {
  __shared__ double tile[kTile][kTile + 1];
  const int j0 = blockIdx.x * kTile, o0 = blockIdx.y * kTile;
  for (int r = threadIdx.y; r < kTile; r += blockDim.y) {
    const int o = o0 + r, j = j0 + threadIdx.x;
    if (o < out && j < in) {
      const uint16_t b = w16[int64_t(o) * in + j];
      tile[r][threadIdx.x] = dead[j] ? 0.0 : double(bf16 ? bf16_to_f32(b) : __half2float(__ushort_as_half(b)));
    }
  }
  __syncthreads();
  for (int c = threadIdx.y; c < kTile; c += blockDim.y) {
    const int j = j0 + c, o = o0 + threadIdx.x;
    if (o < out && j < in) w[o + int64_t(j) * out] = tile[threadIdx.x][c];
  }
}

__global__ void group_amax_kernel(const double* w, float* amax, int out, int in, int gsize) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y;
  if (o >= out) return;
  double m = 0;
  for (int j = g * gsize; j < (g + 1) * gsize; ++j) m = fmax(m, fabs(w[o + int64_t(j) * out]));
  amax[int64_t(o) * (in / gsize) + g] = float(m);
}

// Rows per CTA of the block sweep: the CTA keeps its rows' block columns in shared memory, and the rows are
// independent, so each column step needs only the CTA's own barrier.
constexpr int kRows = 16;
constexpr int kSweepThreads = 256;

__global__ void __launch_bounds__(kSweepThreads) block_kernel(const GptqBlockArgs a) {
  __shared__ double ws[kRows][kGptqBlock + 1];
  __shared__ double es[kRows];
  const int row0 = blockIdx.x * kRows;
  for (int idx = threadIdx.x; idx < kRows * a.count; idx += kSweepThreads) {
    const int r = idx % kRows, c = idx / kRows, o = row0 + r;
    ws[r][c] = o < a.out ? a.w[o + int64_t(a.j1 + c) * a.out] : 0.0;
  }
  __syncthreads();
  for (int i = 0; i < a.count; ++i) {
    const int j = a.j1 + i;
    const double* lj = a.l + int64_t(j) * a.n;   // lj[k] = U[j][k]
    if (threadIdx.x < kRows) {
      const int o = row0 + threadIdx.x;
      double e = 0;
      if (o < a.out) {
        const float scale = a.scales[int64_t(o) * a.groups + j / a.gsize];
        const double wv = ws[threadIdx.x][i];
        const float q = fminf(fmaxf(rintf(float(wv) / scale), float(-a.qmax)), float(a.qmax));
        a.codes[int64_t(o) * a.n + j] = int8_t(q);
        e = (wv - double(q * scale)) / lj[j];
        a.err[o + int64_t(i) * a.out] = e;
      }
      es[threadIdx.x] = e;
    }
    __syncthreads();
    const int rest = a.count - i - 1;
    for (int idx = threadIdx.x; idx < kRows * rest; idx += kSweepThreads) {
      const int r = idx % kRows, k = i + 1 + idx / kRows;
      ws[r][k] -= es[r] * lj[a.j1 + k];
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t gptq_hessian_to_f64(const float* h32, double* h64, int n, cudaStream_t stream) {
  const int64_t total = int64_t(n) * n;
  hessian_to_f64_kernel<<<unsigned((total + 255) / 256), 256, 0, stream>>>(h32, h64, n);
  return cudaGetLastError();
}

cudaError_t gptq_dead_and_damp(double* h, uint8_t* dead, int n, double damp_pct, cudaStream_t stream) {
  dead_and_damp_kernel<<<1, kDampThreads, 0, stream>>>(h, dead, n, damp_pct);
  return cudaGetLastError();
}

cudaError_t gptq_weights_f64(const uint16_t* w16, bool bf16, const uint8_t* dead, double* w, int out, int in,
                             cudaStream_t stream) {
  const dim3 grid(unsigned((in + kTile - 1) / kTile), unsigned((out + kTile - 1) / kTile));
  weights_f64_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(w16, bf16, dead, w, out, in);
  return cudaGetLastError();
}

cudaError_t gptq_group_amax(const double* w, float* amax, int out, int in, int gsize, cudaStream_t stream) {
  const dim3 grid(unsigned((out + 255) / 256), unsigned(in / gsize));
  group_amax_kernel<<<grid, 256, 0, stream>>>(w, amax, out, in, gsize);
  return cudaGetLastError();
}

cudaError_t gptq_block_run(const GptqBlockArgs& args, cudaStream_t stream) {
  if (args.count < 1 || args.count > kGptqBlock) return cudaErrorInvalidValue;
  block_kernel<<<unsigned((args.out + kRows - 1) / kRows), kSweepThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace soartune::kernels
