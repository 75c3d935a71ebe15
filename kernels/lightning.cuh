// Lightning attention (MiniCPM-SALA's linear-attention mixer: Simple GLA with a constant log-decay per head) on
// the GPU, and the small fused ops around it. The math is engine/lightning_attention.h's; the CPU twins are
// kernels/lightning_ref.h.
//
// lightning_qk_run: per token and head, in place on the bf16 output of the fused projection:
//   q_h = rope(rmsnorm(q_h) * q_norm), k_h = rope(rmsnorm(k_h) * k_norm)   (norm skipped when its gamma is
//   null, rope skipped when !rope; half-split rotation, angle = pos * theta^(-2j / head_dim))
// qkv bf16 [T][row_stride]: q (heads * d) at column 0, k (kv_heads * d) at heads * d, v after k.
//
// lightning_run: for every sequence of the step (tokens q_offsets[s] .. q_offsets[s + 1] - 1, slot slots[s]),
// per query head h (kv head h / (heads / kv_heads)), with S the slot's state [d_k][d_v] of head h, reset to 0
// before the first token when start_pos[s] == 0, and g = log_decay[h]:
//     S_t = exp(g) S_{t-1} + k_t^T v_t,        o_t = scale * q_t S_t
// A one-token sequence takes the recurrence; longer ones the chunked form with `chunk` tokens per chunk (the
// lightning_chunk knob). With a bf16 state the state is rounded to bf16 after every recurrence step and after
// every chunk, exactly where the CPU twin rounds it; the arithmetic is fp32. The state is updated in place.
// out fp32 [T][heads * d] (row stride heads * d).
// Capturable in a CUDA graph: nothing but max_tokens and batch comes from the host.
//
// output_gate_run: out[i] = bf16( norm(attn[i]) * (gate ? sigmoid(gate[i]) : 1) ), norm(x) = x / sqrt(mean(x^2)
// + eps) * gamma over the whole row of `width` (skipped when gamma is null). attn fp32 or bf16 [T][width]
// (row stride width); gate bf16, row i at gate + i * gate_stride. Serves the lightning output (norm + gate)
// and the softmax layers' output gate (no norm).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace soartune::kernels {

enum class LightningStateDtype : int { kFp32 = 0, kBf16 = 1 };

// The chunked prefill's two forms: chunk GEMMs on tensor cores (mma.sync m16n8k16 bf16 -> fp32, fp32 operands
// split into bf16 hi + lo), or fp32 FMAs on CUDA cores. kAuto takes tensor cores where they can run (qkv 16-byte
// aligned, row_stride a multiple of 8), else CUDA cores; the others force one (tests, lightning_timing).
enum class LightningPrefillForm : int { kAuto = 0, kTensorCores = 1, kCudaCores = 2 };

inline constexpr int lightning_state_bytes(LightningStateDtype t) { return t == LightningStateDtype::kFp32 ? 4 : 2; }

struct LightningQkArgs {
  void* qkv = nullptr;                 // bf16, updated in place
  int64_t row_stride = 0;              // elements between token rows
  const float* q_norm = nullptr;       // [head_dim] or null
  const float* k_norm = nullptr;       // [head_dim] or null
  const int32_t* positions = nullptr;  // device [T]
  bool rope = true;
  float rope_theta = 10000.f;
  float eps = 1e-6f;
  int tokens = 0, heads = 0, kv_heads = 0, head_dim = 0;
};

struct LightningArgs {
  const void* qkv = nullptr;           // bf16 [T][row_stride], after lightning_qk_run
  int64_t row_stride = 0;
  float* out = nullptr;                // fp32 [T][heads * head_dim]
  void* state = nullptr;               // this layer's states [slots][heads][head_dim][head_dim], state_dtype
  LightningStateDtype state_dtype = LightningStateDtype::kFp32;
  int slots = 0;                       // states in `state`
  const int32_t* q_offsets = nullptr;  // device [batch + 1]
  const int32_t* start_pos = nullptr;  // device [batch]: 0 resets the slot's state first
  const int32_t* seq_slots = nullptr;  // device [batch]
  const float* log_decay = nullptr;    // device [heads], < 0
  float scale = 1.f;
  int batch = 0;
  int max_tokens = 1;                  // host: the longest sequence of the step (1: a decode-only step)
  int chunk = 64;
  int heads = 0, kv_heads = 0, head_dim = 0;
  void* workspace = nullptr;           // lightning_workspace_bytes(...) bytes, or null when that is 0
  LightningPrefillForm prefill_form = LightningPrefillForm::kAuto;
};

struct OutputGateArgs {
  const void* attn = nullptr;
  bool attn_bf16 = false;              // else fp32
  const void* gate = nullptr;          // bf16 or null
  int64_t gate_stride = 0;
  const float* gamma = nullptr;        // [width] or null
  void* out = nullptr;                 // bf16 [T][width]
  int tokens = 0, width = 0;
  float eps = 1e-6f;
};

// "" when the shapes can run, else a message naming the field and the allowed values.
std::string lightning_qk_can_implement(const LightningQkArgs& args);
std::string lightning_can_implement(const LightningArgs& args);
std::string output_gate_can_implement(const OutputGateArgs& args);

// Scratch lightning_run needs for steps of up to `tokens` tokens in up to `batch` sequences.
std::size_t lightning_workspace_bytes(int tokens, int batch, int heads, int head_dim, int chunk);

cudaError_t lightning_qk_run(const LightningQkArgs& args, cudaStream_t stream);
cudaError_t lightning_run(const LightningArgs& args, cudaStream_t stream);
cudaError_t output_gate_run(const OutputGateArgs& args, cudaStream_t stream);

}  // namespace soartune::kernels
