#include "kernels/lightning.cuh"

#include <cuda_bf16.h>

#include "kernels/launch.cuh"
#include "kernels/numeric_formats.h"

namespace soartune::kernels {
namespace {

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float load_state(const float* p) { return *p; }
__device__ __forceinline__ float load_state(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_state(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_state(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
// What the state holds after a store: the fp32 value, or its bf16 rounding (kept in fp32 between updates).
__device__ __forceinline__ float stored_value(float, float v) { return v; }
__device__ __forceinline__ float stored_value(__nv_bfloat16, float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// ---- q/k norm + RoPE -------------------------------------------------------------------------------------
// A warp per (token, q or k head): lane l holds the rotation pairs (j, j + d/2) for j = l, l + 32, ...; the
// RMSNorm's sum of squares is one warp reduction. The angle pos * theta^(-2j/d) is formed and reduced modulo
// 2 pi in fp64 (at 60k positions an fp32 product is off by up to 4e-3 rad), the sine and cosine in fp32.
constexpr int kQkWarps = 4;
constexpr int kQkMaxPairs = 4;  // head_dim <= 256

__global__ void __launch_bounds__(kQkWarps * 32) lightning_qk_kernel(const LightningQkArgs a) {
  pdl_launch_dependents();
  const int t = blockIdx.x, lane = threadIdx.x % 32;
  const int head = blockIdx.y * kQkWarps + threadIdx.x / 32;
  const int d = a.head_dim, half = d / 2;
  // Positions come from the host before the step: read before the wait, while the projection drains.
  const double pos = a.rope ? a.positions[t] : 0.0;
  pdl_wait();
  if (head >= a.heads + a.kv_heads) return;
  __nv_bfloat16* x = static_cast<__nv_bfloat16*>(a.qkv) + int64_t(t) * a.row_stride + int64_t(head) * d;
  const float* gamma = head < a.heads ? a.q_norm : a.k_norm;
  float x1[kQkMaxPairs], x2[kQkMaxPairs];
  float ss = 0;
#pragma unroll
  for (int p = 0; p < kQkMaxPairs; ++p) {
    const int j = lane + 32 * p;
    x1[p] = j < half ? __bfloat162float(x[j]) : 0.f;
    x2[p] = j < half ? __bfloat162float(x[j + half]) : 0.f;
    ss += x1[p] * x1[p] + x2[p] * x2[p];
  }
  const float inv = gamma ? rsqrtf(warp_sum(ss) / float(d) + a.eps) : 1.f;
#pragma unroll
  for (int p = 0; p < kQkMaxPairs; ++p) {
    const int j = lane + 32 * p;
    if (j >= half) break;
    float y1 = x1[p] * inv, y2 = x2[p] * inv;
    if (gamma) y1 *= gamma[j], y2 *= gamma[j + half];
    if (a.rope) {
      const double inv_freq = pow(double(a.rope_theta), -2.0 * j / d);
      const double ang = fmod(pos * inv_freq, 6.283185307179586);
      float s, c;
      sincosf(float(ang), &s, &c);
      const float r1 = y1 * c - y2 * s, r2 = y2 * c + y1 * s;
      y1 = r1, y2 = r2;
    }
    x[j] = __float2bfloat16_rn(y1);
    x[j + half] = __float2bfloat16_rn(y2);
  }
}

// ---- decode: one token per sequence -------------------------------------------------------------------------
// A CTA per (sequence, head, 32 state columns): lane w owns column w, the 8 warps split the d_k rows. Each
// state element is read once, decayed, given k_i v_w, multiplied into the output and written back; the
// output's partial sums over rows meet in shared memory. Bytes: the state slice read + written once.
constexpr int kCols = 32;
constexpr int kDecodeWarps = 8;

template <typename StateT>
__global__ void __launch_bounds__(kDecodeWarps * 32) lightning_decode_kernel(const LightningArgs a) {
  __shared__ float part[kDecodeWarps][kCols];
  const int s = blockIdx.x, h = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int d = a.head_dim, col = blockIdx.z * kCols + lane;
  pdl_wait();
  const int t0 = a.q_offsets[s];
  if (a.q_offsets[s + 1] - t0 != 1) return;  // prefill sequences take the chunked kernel
  const bool reset = a.start_pos[s] == 0;
  const int kvh = h / (a.heads / a.kv_heads);
  const __nv_bfloat16* row = static_cast<const __nv_bfloat16*>(a.qkv) + int64_t(t0) * a.row_stride;
  const __nv_bfloat16* q = row + int64_t(h) * d;
  const __nv_bfloat16* k = row + int64_t(a.heads + kvh) * d;
  const float v = __bfloat162float(row[int64_t(a.heads + a.kv_heads + kvh) * d + col]);
  const float decay = expf(a.log_decay[h]);
  StateT* S = static_cast<StateT*>(a.state) + (int64_t(a.seq_slots[s]) * a.heads + h) * d * d + col;
  float acc = 0;
#pragma unroll 4
  for (int i = warp; i < d; i += kDecodeWarps) {
    const float old = reset ? 0.f : load_state(S + int64_t(i) * d);
    const float sn = decay * old + __bfloat162float(k[i]) * v;
    acc += __bfloat162float(q[i]) * sn;  // the fp32 state, before a bf16 store rounds it
    store_state(S + int64_t(i) * d, sn);
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp == 0) {
    float o = 0;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) o += part[w][lane];
    a.out[int64_t(t0) * a.heads * d + int64_t(h) * d + col] = a.scale * o;
  }
}

// ---- prefill: the chunked form ----------------------------------------------------------------------------
// A CTA per (sequence, head, 32 state columns) walks the sequence's chunks in order, its state slice S
// [d_k][32] in shared memory (fp32; rounded to bf16 after every chunk with a bf16 state). A chunk of C tokens
// is taken in tiles of 64 rows: per query tile, o = exp((i + 1) g) q_i S (S as before the chunk) plus, per key
// tile at or before it, A = (Q K^T) * exp((i - j) g) masked to j <= i, o += A V; then S = exp(C g) S +
// sum_j exp((C - 1 - j) g) k_j^T v_j. FLOPs a chunk and CTA: 2 C^2 d (Q K^T, repeated by each of the d/32
// column CTAs) + 2 C d 32 (Q S) + C^2 32 (A V, causal) + 2 C d 32 (state).
// A 60k-token prefill of 32 heads of d 128 runs 128 CTAs, one an SM.
constexpr int kTile = 64;
constexpr int kChunkThreads = 256;
constexpr int kMaxChunk = 256;

template <int D>
constexpr size_t chunk_smem_floats() {
  return size_t(D) * kCols             // S
         + 2 * size_t(kTile) * (D + 1)  // Q, K tiles (padded rows: K read down a column)
         + size_t(kTile) * kCols        // V tile
         + size_t(kTile) * (kTile + 1)  // A tile
         + kMaxChunk + 1;               // exp(m g)
}

template <int D, typename StateT>
__global__ void __launch_bounds__(kChunkThreads) lightning_chunk_kernel(const LightningArgs a) {
  extern __shared__ float sm[];
  float* sS = sm;                               // [D][kCols]
  float* sQ = sS + D * kCols;                   // [kTile][D + 1]
  float* sK = sQ + kTile * (D + 1);             // [kTile][D + 1]
  float* sV = sK + kTile * (D + 1);             // [kTile][kCols]
  float* sA = sV + kTile * kCols;               // [kTile][kTile + 1]
  float* pw = sA + kTile * (kTile + 1);         // [chunk + 1]
  const int s = blockIdx.x, h = blockIdx.y, c0 = blockIdx.z * kCols;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  constexpr int kWarps = kChunkThreads / 32;
  pdl_wait();
  const int t0 = a.q_offsets[s], n = a.q_offsets[s + 1] - t0;
  if (n < 2) return;  // one-token sequences take the decode kernel
  const int kvh = h / (a.heads / a.kv_heads);
  const float g = a.log_decay[h];
  for (int m = tid; m <= a.chunk; m += kChunkThreads) pw[m] = expf(g * float(m));
  StateT* S = static_cast<StateT*>(a.state) + (int64_t(a.seq_slots[s]) * a.heads + h) * D * D + c0;
  const bool reset = a.start_pos[s] == 0;
  for (int idx = tid; idx < D * kCols; idx += kChunkThreads) {
    const int r = idx / kCols, c = idx % kCols;
    sS[idx] = reset ? 0.f : load_state(S + int64_t(r) * D + c);
  }
  const __nv_bfloat16* qkv = static_cast<const __nv_bfloat16*>(a.qkv);
  const int64_t q_col = int64_t(h) * D, k_col = int64_t(a.heads + kvh) * D,
                v_col = int64_t(a.heads + a.kv_heads + kvh) * D + c0;
  // Rows [r0, r0 + rows) of the sequence into a [kTile][D + 1] tile, zeros past `rows`.
  auto load_rows = [&](float* dst, int64_t col, int r0, int rows) {
    for (int idx = tid; idx < kTile * D; idx += kChunkThreads) {
      const int r = idx / D, c = idx % D;
      dst[r * (D + 1) + c] =
          r < rows ? __bfloat162float(qkv[int64_t(t0 + r0 + r) * a.row_stride + col + c]) : 0.f;
    }
  };
  auto load_v = [&](int r0, int rows) {
    for (int idx = tid; idx < kTile * kCols; idx += kChunkThreads) {
      const int r = idx / kCols, c = idx % kCols;
      sV[idx] = r < rows ? __bfloat162float(qkv[int64_t(t0 + r0 + r) * a.row_stride + v_col + c]) : 0.f;
    }
  };
  float* out = a.out + int64_t(t0) * a.heads * D + q_col + c0 + lane;
  const int64_t out_stride = int64_t(a.heads) * D;
  constexpr int kRowsPerWarp = kTile / kWarps;  // output rows of a query tile per warp
  constexpr int kStateRows = D / kWarps;        // state rows per warp
  const int ty = tid / 16, tx = tid % 16;       // A tile: rows ty + 16 a, columns tx + 16 b

  for (int cs = 0; cs < n; cs += a.chunk) {
    const int C = min(a.chunk, n - cs);
    __syncthreads();  // pw and the state (first chunk), or the previous chunk's state update, are visible
    for (int qt = 0; qt < C; qt += kTile) {
      const int qn = min(kTile, C - qt);
      load_rows(sQ, q_col, cs + qt, qn);
      __syncthreads();
      float o[kRowsPerWarp];
#pragma unroll
      for (int m = 0; m < kRowsPerWarp; ++m) {
        const int r = warp + kWarps * m;
        float acc = 0;
#pragma unroll 8
        for (int c = 0; c < D; ++c) acc += sQ[r * (D + 1) + c] * sS[c * kCols + lane];
        o[m] = pw[min(qt + r + 1, a.chunk)] * acc;
      }
      for (int kt = 0; kt <= qt; kt += kTile) {
        const int kn = min(kTile, C - kt);
        __syncthreads();  // the previous key tile's readers are done
        load_rows(sK, k_col, cs + kt, kn);
        load_v(cs + kt, kn);
        __syncthreads();
        float acc[4][4] = {};
#pragma unroll 4
        for (int c = 0; c < D; ++c) {
          float qa[4], kb[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) qa[i] = sQ[(ty + 16 * i) * (D + 1) + c], kb[i] = sK[(tx + 16 * i) * (D + 1) + c];
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] += qa[i] * kb[j];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int qi = qt + ty + 16 * i, kj = kt + tx + 16 * j;
            sA[(ty + 16 * i) * (kTile + 1) + tx + 16 * j] = kj <= qi && qi < C && kj < C ? pw[qi - kj] * acc[i][j] : 0.f;
          }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < kRowsPerWarp; ++m) {
          const int r = warp + kWarps * m;
          float acc2 = 0;
          for (int c = 0; c < kn; ++c) acc2 += sA[r * (kTile + 1) + c] * sV[c * kCols + lane];
          o[m] += acc2;
        }
      }
#pragma unroll
      for (int m = 0; m < kRowsPerWarp; ++m) {
        const int r = warp + kWarps * m;
        if (r < qn) out[int64_t(cs + qt + r) * out_stride] = a.scale * o[m];
      }
      __syncthreads();  // sQ is free for the next query tile
    }
    // State update: thread (warp, lane) owns rows warp + 8 m' of column lane.
    float sn[kStateRows];
#pragma unroll
    for (int m = 0; m < kStateRows; ++m) sn[m] = pw[C] * sS[(warp + kWarps * m) * kCols + lane];
    for (int kt = 0; kt < C; kt += kTile) {
      const int kn = min(kTile, C - kt);
      __syncthreads();
      load_rows(sK, k_col, cs + kt, kn);
      load_v(cs + kt, kn);
      __syncthreads();
      for (int c = 0; c < kn; ++c) {
        const float wv = pw[C - 1 - (kt + c)] * sV[c * kCols + lane];
#pragma unroll
        for (int m = 0; m < kStateRows; ++m) sn[m] += sK[c * (D + 1) + warp + kWarps * m] * wv;
      }
    }
    __syncthreads();  // every reader of the old state (the query tiles) is done
#pragma unroll
    for (int m = 0; m < kStateRows; ++m) sS[(warp + kWarps * m) * kCols + lane] = stored_value(StateT{}, sn[m]);
  }
  __syncthreads();
  for (int idx = tid; idx < D * kCols; idx += kChunkThreads) {
    const int r = idx / kCols, c = idx % kCols;
    store_state(S + int64_t(r) * D + c, sS[idx]);
  }
}

template <int D, typename StateT>
cudaError_t launch_chunk(const LightningArgs& a, cudaStream_t stream) {
  const size_t smem = chunk_smem_floats<D>() * sizeof(float);
  static const cudaError_t attr =
      cudaFuncSetAttribute(lightning_chunk_kernel<D, StateT>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (attr != cudaSuccess) return attr;
  return launch(lightning_chunk_kernel<D, StateT>, dim3(a.batch, a.heads, D / kCols), kChunkThreads, smem, stream,
                a);
}

template <typename StateT>
cudaError_t run_typed(const LightningArgs& a, cudaStream_t stream) {
  cudaError_t e = launch(lightning_decode_kernel<StateT>, dim3(a.batch, a.heads, a.head_dim / kCols),
                         kDecodeWarps * 32, 0, stream, a);
  if (e != cudaSuccess || a.max_tokens <= 1) return e;
  return a.head_dim == 64 ? launch_chunk<64, StateT>(a, stream) : launch_chunk<128, StateT>(a, stream);
}

// ---- output norm + gate -----------------------------------------------------------------------------------
// A CTA per row: the sum of squares over the whole row (fp32, a block reduction), then the row again.
constexpr int kGateThreads = 256;

__global__ void __launch_bounds__(kGateThreads) output_gate_kernel(const OutputGateArgs a) {
  __shared__ float red[kGateThreads / 32];
  __shared__ float inv_s;
  pdl_launch_dependents();
  const int t = blockIdx.x, tid = threadIdx.x;
  pdl_wait();
  const float* xf = static_cast<const float*>(a.attn) + int64_t(t) * a.width;
  const __nv_bfloat16* xb = static_cast<const __nv_bfloat16*>(a.attn) + int64_t(t) * a.width;
  auto x = [&](int c) { return a.attn_bf16 ? __bfloat162float(xb[c]) : xf[c]; };
  float inv = 1.f;
  if (a.gamma) {
    float ss = 0;
    for (int c = tid; c < a.width; c += kGateThreads) ss += x(c) * x(c);
    ss = warp_sum(ss);
    if (tid % 32 == 0) red[tid / 32] = ss;
    __syncthreads();
    if (tid == 0) {
      float tot = 0;
      for (int w = 0; w < kGateThreads / 32; ++w) tot += red[w];
      inv_s = rsqrtf(tot / float(a.width) + a.eps);
    }
    __syncthreads();
    inv = inv_s;
  }
  const __nv_bfloat16* gate = static_cast<const __nv_bfloat16*>(a.gate) + int64_t(t) * a.gate_stride;
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out) + int64_t(t) * a.width;
  for (int c = tid; c < a.width; c += kGateThreads) {
    float y = a.gamma ? x(c) * inv * a.gamma[c] : x(c);
    if (a.gate) y *= 1.f / (1.f + __expf(-__bfloat162float(gate[c])));
    out[c] = __float2bfloat16_rn(y);
  }
}

}  // namespace

std::string lightning_qk_can_implement(const LightningQkArgs& a) {
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.head_dim > 2 * 32 * kQkMaxPairs)
    return "head_dim: must be an even number in 2..256, got " + std::to_string(a.head_dim);
  if (a.heads <= 0 || a.kv_heads <= 0) return "heads / kv_heads: must be positive";
  if (a.tokens < 0) return "tokens: must be >= 0";
  if (a.row_stride < int64_t(a.heads + a.kv_heads) * a.head_dim)
    return "row_stride: must be >= (heads + kv_heads) * head_dim";
  if (!a.qkv || (a.rope && !a.positions)) return "pointers: qkv (and positions with rope) are required";
  return "";
}

std::string lightning_can_implement(const LightningArgs& a) {
  if (a.head_dim != 64 && a.head_dim != 128)
    return "head_dim: must be 64 or 128, got " + std::to_string(a.head_dim);
  if (a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0)
    return "heads / kv_heads: heads must be a positive multiple of kv_heads";
  if (a.chunk < 16 || a.chunk > kMaxChunk || a.chunk % 16 != 0)
    return "chunk: must be a multiple of 16 in 16..256, got " + std::to_string(a.chunk);
  if (a.state_dtype != LightningStateDtype::kFp32 && a.state_dtype != LightningStateDtype::kBf16)
    return "state_dtype: must be fp32 or bf16";
  if (a.batch < 0 || a.max_tokens < 1) return "batch / max_tokens: batch must be >= 0 and max_tokens >= 1";
  if (a.slots <= 0) return "slots: must be positive";
  if (a.row_stride < int64_t(a.heads + 2 * a.kv_heads) * a.head_dim)
    return "row_stride: must be >= (heads + 2 kv_heads) * head_dim";
  if (!a.qkv || !a.out || !a.state || !a.q_offsets || !a.start_pos || !a.seq_slots || !a.log_decay)
    return "pointers: qkv, out, state, q_offsets, start_pos, seq_slots and log_decay are required";
  return "";
}

std::string output_gate_can_implement(const OutputGateArgs& a) {
  if (a.width <= 0) return "width: must be positive";
  if (a.tokens < 0) return "tokens: must be >= 0";
  if (a.gate && a.gate_stride < a.width) return "gate_stride: must be >= width";
  if (!a.attn || !a.out) return "pointers: attn and out are required";
  return "";
}

std::size_t lightning_workspace_bytes(int, int, int, int, int) { return 0; }

cudaError_t lightning_qk_run(const LightningQkArgs& a, cudaStream_t stream) {
  if (a.tokens == 0) return cudaSuccess;
  const dim3 grid(a.tokens, (a.heads + a.kv_heads + kQkWarps - 1) / kQkWarps);
  return launch(lightning_qk_kernel, grid, kQkWarps * 32, 0, stream, a);
}

cudaError_t lightning_run(const LightningArgs& a, cudaStream_t stream) {
  if (a.batch == 0) return cudaSuccess;
  return a.state_dtype == LightningStateDtype::kFp32 ? run_typed<float>(a, stream)
                                                     : run_typed<__nv_bfloat16>(a, stream);
}

cudaError_t output_gate_run(const OutputGateArgs& a, cudaStream_t stream) {
  if (a.tokens == 0) return cudaSuccess;
  return launch(output_gate_kernel, dim3(a.tokens), kGateThreads, 0, stream, a);
}

}  // namespace soartune::kernels
