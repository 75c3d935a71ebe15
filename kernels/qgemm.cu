#include "kernels/qgemm.cuh"

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/launch.cuh"
#include "kernels/mma_bf16.cuh"

namespace soartune::kernels {
namespace {

constexpr int kBK = 64;              // k of one tile
constexpr int kPitch = kBK + 8;      // bf16 elements a shared-memory row: 144 bytes, so the eight rows a
                                     // quarter-warp's fragment loads touch sit in distinct banks
constexpr int kWarpsN = 4;           // warps along the output columns (32 columns each)
constexpr int kWarpsM = 2;           // warps along the rows of X (32 rows each)
constexpr int kTileN = 32 * kWarpsN;  // 128
constexpr int kTileM = 32 * kWarpsM;  // 64
constexpr int kThreads = 32 * kWarpsN * kWarpsM;
constexpr int kMinTilesPerSlice = 8;
constexpr int kMaxSplits = 16;
constexpr size_t kSmemBytes = size_t(2) * (kTileN + kTileM) * kPitch * 2;  // double-buffered W and X tiles

constexpr int values_per_chunk(WeightFormat f) { return f == WeightFormat::kInt4 ? 32 : 16; }

struct Params {
  const uint8_t* w;
  const float* scales;
  const __nv_bfloat16* x;
  void* y;
  float* ws;  // [splits][m][n] partials (splits > 1)
  int n, k, m, group, groups_per_row, splits;
  int64_t x_stride, y_stride;
  bool out_bf16, accumulate;
};

// One 16-byte chunk of codes as bf16(code * s), pairs in element order: pair i holds elements 2i, 2i + 1.
// The same values gemm.cu's expansion writes (weight_format.h gives the int4 nibble order).
template <WeightFormat F>
__device__ __forceinline__ void dequant_chunk(const uint4& raw, float s, uint32_t (&p)[values_per_chunk(F) / 2]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (F == WeightFormat::kInt4) int4_word_bf16(w[j], s, p + 4 * j);
    else int8_word_bf16(w[j], s, p + 2 * j);
  }
}

__device__ __forceinline__ uint32_t lds32(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Writes one result: into the slice's workspace, or to y with the epilogue.
__device__ __forceinline__ void put(const Params& p, int slice, int row, int col, float v) {
  if (row >= p.m || col >= p.n) return;
  if (p.splits > 1) {
    p.ws[(int64_t(slice) * p.m + row) * p.n + col] = v;
  } else if (p.out_bf16) {
    reinterpret_cast<__nv_bfloat16*>(p.y)[row * p.y_stride + col] = __float2bfloat16_rn(v);
  } else {
    float* y = reinterpret_cast<float*>(p.y) + row * p.y_stride + col;
    *y = p.accumulate ? *y + v : v;
  }
}

// CTA (blockIdx.x, blockIdx.y, blockIdx.z): output columns 128 x, rows of X 64 y, k-tiles of slice z.
// Warp (wn, wm) holds columns wn * 32 + [0, 32) as two m16 tiles (the mma's A: weight rows) and rows
// wm * 32 + [0, 32) as four n8 tiles (the mma's B: X rows), so its accumulators are acc[2][4][4].
// Fragments follow the PTX m16n8k16 layout: thread (g = lane / 4, t = lane % 4) holds A rows g, g + 8 at
// k 2t, 2t + 1 (+ 8), B column g at k 2t, 2t + 1 (+ 8), and D rows g, g + 8 at columns 2t, 2t + 1.
template <WeightFormat F>
__global__ void __launch_bounds__(kThreads) qgemm_kernel(const Params p) {
  constexpr int V = values_per_chunk(F);
  constexpr int kChunksPerRow = kBK / V;                    // a tile row's 16-byte chunks: 2 (int4), 4 (int8)
  constexpr int kWPerThread = kTileN * kChunksPerRow / kThreads;
  constexpr int kXPerThread = kTileM * (kBK / 8) / kThreads;  // 16-byte pieces of X (8 bf16)
  static_assert(kWPerThread >= 1 && kWPerThread * kThreads == kTileN * kChunksPerRow, "W tile split");
  static_assert(kXPerThread >= 1 && kXPerThread * kThreads == kTileM * (kBK / 8), "X tile split");
  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t* w_tile = reinterpret_cast<uint16_t*>(smem);  // [2][kTileN][kPitch]
  uint16_t* x_tile = w_tile + 2 * kTileN * kPitch;        // [2][kTileM][kPitch]

  pdl_launch_dependents();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wn = warp % kWarpsN, wm = warp / kWarpsN;
  const int n0 = blockIdx.x * kTileN, m0 = blockIdx.y * kTileM;
  const int k_tiles = p.k / kBK;
  const int kt_begin = int(int64_t(k_tiles) * blockIdx.z / p.splits);
  const int kt_end = int(int64_t(k_tiles) * (blockIdx.z + 1) / p.splits);
  const int64_t row_bytes = F == WeightFormat::kInt4 ? p.k / 2 : p.k;

  uint4 w_raw[kWPerThread];
  float w_scale[kWPerThread];
  uint4 x_raw[kXPerThread];
  // Weights are written by no kernel, so the first tile's codes go out before the PDL wait; X after it.
  auto load_w = [&](int kt) {
#pragma unroll
    for (int i = 0; i < kWPerThread; ++i) {
      const int c = tid + i * kThreads, r = c / kChunksPerRow, cc = c % kChunksPerRow;
      const int row = n0 + r;
      const int col = kt * kBK + cc * V;
      if (row < p.n) {
        w_raw[i] = load_stream(p.w + row * row_bytes + col / V * 16);
        w_scale[i] = __ldg(p.scales + int64_t(row) * p.groups_per_row + col / p.group);
      } else {
        w_raw[i] = make_uint4(0, 0, 0, 0);
        w_scale[i] = 0.f;
      }
    }
  };
  auto load_x = [&](int kt) {
#pragma unroll
    for (int i = 0; i < kXPerThread; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, c8 = c & 7;
      const int row = m0 + r;
      x_raw[i] = row < p.m ? __ldg(reinterpret_cast<const uint4*>(p.x + row * p.x_stride + kt * kBK + c8 * 8))
                           : make_uint4(0, 0, 0, 0);
    }
  };
  auto store = [&](int buf) {
    uint16_t* wt = w_tile + buf * kTileN * kPitch;
    uint16_t* xt = x_tile + buf * kTileM * kPitch;
#pragma unroll
    for (int i = 0; i < kWPerThread; ++i) {
      const int c = tid + i * kThreads, r = c / kChunksPerRow, cc = c % kChunksPerRow;
      uint32_t v[V / 2];
      dequant_chunk<F>(w_raw[i], w_scale[i], v);
      uint4* dst = reinterpret_cast<uint4*>(wt + r * kPitch + cc * V);
#pragma unroll
      for (int q = 0; q < V / 8; ++q) dst[q] = make_uint4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
    }
#pragma unroll
    for (int i = 0; i < kXPerThread; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, c8 = c & 7;
      *reinterpret_cast<uint4*>(xt + r * kPitch + c8 * 8) = x_raw[i];
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.f;

  load_w(kt_begin);
  pdl_wait();
  load_x(kt_begin);
  store(0);
  __syncthreads();
#pragma unroll 1
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int cur = (kt - kt_begin) & 1;
    const bool more = kt + 1 < kt_end;
    if (more) {
      load_w(kt + 1);
      load_x(kt + 1);
    }
    const uint16_t* wt = w_tile + cur * kTileN * kPitch;
    const uint16_t* xt = x_tile + cur * kTileM * kPitch;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t a[2][4], b[4][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint16_t* r0 = wt + (wn * 32 + mt * 16 + g) * kPitch + ks * 16 + 2 * t;
        const uint16_t* r1 = r0 + 8 * kPitch;
        a[mt][0] = lds32(r0);
        a[mt][1] = lds32(r1);
        a[mt][2] = lds32(r0 + 8);
        a[mt][3] = lds32(r1 + 8);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const uint16_t* r = xt + (wm * 32 + nt * 8 + g) * kPitch + ks * 16 + 2 * t;
        b[nt][0] = lds32(r);
        b[nt][1] = lds32(r + 8);
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          mma_bf16_16816(acc[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[nt][0], b[nt][1]);
    }
    if (more) store(cur ^ 1);
    __syncthreads();
  }

  // acc[mt][nt]: D rows = output columns n0 + wn * 32 + mt * 16 + g (+ 8), D columns = rows of X
  // m0 + wm * 32 + nt * 8 + 2t (+ 1).
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int col = n0 + wn * 32 + mt * 16 + g;
      const int row = m0 + wm * 32 + nt * 8 + 2 * t;
      put(p, blockIdx.z, row, col, acc[mt][nt][0]);
      put(p, blockIdx.z, row + 1, col, acc[mt][nt][1]);
      put(p, blockIdx.z, row, col + 8, acc[mt][nt][2]);
      put(p, blockIdx.z, row + 1, col + 8, acc[mt][nt][3]);
    }
}

// Sums the slices' partials in slice order and applies the epilogue.
__global__ void __launch_bounds__(256) qgemm_reduce_kernel(const Params p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t total = int64_t(p.m) * p.n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int z = 0; z < p.splits; ++z) s += p.ws[int64_t(z) * total + i];
    const int row = int(i / p.n), col = int(i - int64_t(row) * p.n);
    if (p.out_bf16) {
      reinterpret_cast<__nv_bfloat16*>(p.y)[row * p.y_stride + col] = __float2bfloat16_rn(s);
    } else {
      float* y = reinterpret_cast<float*>(p.y) + row * p.y_stride + col;
      *y = p.accumulate ? *y + s : s;
    }
  }
}

int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

}  // namespace

size_t qgemm_workspace_bytes(const DeviceLinear& w, int m, int splits) {
  return splits > 1 ? size_t(splits) * size_t(m) * size_t(w.n) * 4 : 0;
}

int qgemm_auto_splits(const DeviceLinear& w, int m, int sms) {
  const int tiles = ceil_div(w.n, kTileN) * ceil_div(m, kTileM);
  if (tiles >= sms) return 1;
  const int want = ceil_div(int64_t(2) * sms, tiles);
  const int most = (w.k / kBK) / kMinTilesPerSlice;
  int s = want < most ? want : most;
  if (s > kMaxSplits) s = kMaxSplits;
  return s < 1 ? 1 : s;
}

std::string qgemm_weights_supported(const DeviceLinear& w) {
  if (w.format != WeightFormat::kInt4 && w.format != WeightFormat::kInt8)
    return std::string("w.format: ") + weight_format_name(w.format) + "; the quantised-weight GEMM takes int4 or int8";
  if (w.n < 1) return "w.n: must be >= 1";
  if (w.k < kBK || w.k % kBK != 0) return "w.k: " + std::to_string(w.k) + " is not a positive multiple of 64";
  const int v = values_per_chunk(w.format);
  if (w.group < v || w.group % v != 0 || w.k % w.group != 0)
    return "w.group: " + std::to_string(w.group) + "; allowed a multiple of " + std::to_string(v) +
           " that divides k = " + std::to_string(w.k);
  return "";
}

std::string qgemm_can_implement(const QgemmArgs& a, int sms) {
  const DeviceLinear& w = a.w;
  if (std::string e = qgemm_weights_supported(w); !e.empty()) return e;
  if (a.m < 1 || a.m > kQgemmMaxRows)
    return "m: " + std::to_string(a.m) + "; allowed 1.." + std::to_string(kQgemmMaxRows);
  if (!w.w || !w.scales || !a.x || !a.y) return "w.w, w.scales, x, y: must all be set";
  const int64_t xs = a.x_stride ? a.x_stride : w.k, ys = a.y_stride ? a.y_stride : w.n;
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0 || xs % 8 != 0 || xs < w.k)
    return "x, x_stride: rows must start 16-byte aligned (x_stride a multiple of 8, at least k)";
  if (ys < w.n) return "y_stride: " + std::to_string(ys) + " is less than n = " + std::to_string(w.n);
  if (a.out_bf16 && a.accumulate) return "accumulate: only into an fp32 y (out_bf16 is set)";
  const int k_tiles = w.k / kBK;
  if (a.splits < 0 || a.splits > k_tiles || a.splits > kMaxSplits)
    return "splits: " + std::to_string(a.splits) + "; allowed 0 (auto) or 1.." +
           std::to_string(k_tiles < kMaxSplits ? k_tiles : kMaxSplits);
  const int s = a.splits ? a.splits : qgemm_auto_splits(w, a.m, sms);
  const size_t need = qgemm_workspace_bytes(w, a.m, s);
  if (need > 0 && (!a.workspace || a.workspace_bytes < need))
    return "workspace: " + std::to_string(s) + " k slices need " + std::to_string(need) + " bytes; given " +
           std::to_string(a.workspace ? a.workspace_bytes : 0);
  return "";
}

std::string qgemm_plan(const QgemmArgs& a, int sms, QgemmPlan* plan) {
  std::string e = qgemm_can_implement(a, sms);
  if (!e.empty()) return e;
  plan->splits = a.splits ? a.splits : qgemm_auto_splits(a.w, a.m, sms);
  plan->grid_x = ceil_div(a.w.n, kTileN);
  plan->grid_y = ceil_div(a.m, kTileM);
  plan->threads = kThreads;
  plan->smem_bytes = kSmemBytes;
  return "";
}

cudaError_t qgemm_run(const QgemmArgs& a, const QgemmPlan& plan, cudaStream_t stream) {
  Params p;
  p.w = static_cast<const uint8_t*>(a.w.w);
  p.scales = a.w.scales;
  p.x = static_cast<const __nv_bfloat16*>(a.x);
  p.y = a.y;
  p.ws = a.workspace;
  p.n = a.w.n;
  p.k = a.w.k;
  p.m = a.m;
  p.group = a.w.group;
  p.groups_per_row = a.w.k / a.w.group;
  p.splits = plan.splits;
  p.x_stride = a.x_stride ? a.x_stride : a.w.k;
  p.y_stride = a.y_stride ? a.y_stride : a.w.n;
  p.out_bf16 = a.out_bf16;
  p.accumulate = a.accumulate;
  const dim3 grid(unsigned(plan.grid_x), unsigned(plan.grid_y), unsigned(plan.splits));
  cudaError_t e;
  if (a.w.format == WeightFormat::kInt4) {
    static const cudaError_t attr = cudaFuncSetAttribute(qgemm_kernel<WeightFormat::kInt4>,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
    if (attr != cudaSuccess) return attr;
    e = launch(qgemm_kernel<WeightFormat::kInt4>, grid, dim3(kThreads), kSmemBytes, stream, p);
  } else {
    static const cudaError_t attr = cudaFuncSetAttribute(qgemm_kernel<WeightFormat::kInt8>,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
    if (attr != cudaSuccess) return attr;
    e = launch(qgemm_kernel<WeightFormat::kInt8>, grid, dim3(kThreads), kSmemBytes, stream, p);
  }
  if (e != cudaSuccess || plan.splits == 1) return e;
  const int64_t total = int64_t(a.m) * a.w.n;
  const int blocks = int(total / 256 + 1 < 132 * 8 ? total / 256 + 1 : 132 * 8);
  return launch(qgemm_reduce_kernel, dim3(unsigned(blocks)), dim3(256), 0, stream, p);
}

}  // namespace soartune::kernels
