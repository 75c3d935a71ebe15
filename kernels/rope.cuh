// RoPE (half-split rotation, HF rotate_half) on q and k, fused with the write of k and v into the paged KV
// cache in its dtype (kernels/attention_paged.h layout). With rotate false (NoPE: MiniCPM-SALA's softmax layers)
// q and k pass unrotated; the copy of q and the cache write stay the same.
//
// qkv    fp32 (or bf16 when qkv_bf16) [T][q_dim + 2 * kv_dim] (q | k | v, as the fused qkv projection writes
//        it), row i at qkv + i * qkv_stride
// bias   optional fp32 [q_dim + 2 * kv_dim], added first (Qwen2-style attention bias)
// q_out  bf16 [T][q_dim] rotated queries
// kv_slot[T] = page * page_size + slot of token i; positions[T] its position; angle = pos * theta^(-2j / head_dim)
// k_cache / v_cache: one layer, cache dtype; fp8 stores value / k_scale (v_scale).
// Bytes per call: T * ((q_dim + 2 kv_dim) * (4 or 2) + q_dim * 2 + 2 * kv_dim * kv_bytes). FLOPs: ~6 * T * (q_dim + kv_dim).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/attention_paged.h"

namespace soartune::kernels {

struct RopeKvArgs {
  const void* qkv = nullptr;
  bool qkv_bf16 = false;               // qkv holds bf16 (else fp32)
  int64_t qkv_stride = 0;              // 0 = q_dim + 2 * kv_dim
  const float* bias = nullptr;         // optional
  void* q_out = nullptr;               // bf16
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const int32_t* positions = nullptr;  // device [T]
  const int32_t* kv_slot = nullptr;    // device [T]
  int tokens = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, page_size = 0;
  KvCacheDtype kv_dtype = KvCacheDtype::kBf16;
  float rope_theta = 10000.f;
  bool rotate = true;                  // false: NoPE, q and k written as they come
  float k_scale = 1.f, v_scale = 1.f;
};

std::string rope_kv_can_implement(const RopeKvArgs& args);
cudaError_t rope_kv_write_run(const RopeKvArgs& args, cudaStream_t stream);

}  // namespace soartune::kernels
