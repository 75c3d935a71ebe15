// The CUDA decoder: device weights (fused qkv and gate|up, repacked), the paged KV cache in its dtype, every
// step buffer, and one forward pass per engine Step. Decode steps of up to cuda_graph_max_bs sequences replay
// CUDA graphs captured in prepare(); nothing in forward() allocates.
//
// Per layer: rmsnorm(+residual) -> qkv linear -> RoPE + KV write -> attention -> o linear ->
//   rmsnorm(+residual) -> gate|up linear -> SwiGLU -> down linear. Linears with <= 32 rows run the
// tensor-core GEMV (kernels/gemv.cuh), more rows run cuBLAS (kernels/gemm.cuh).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model_config.h"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_paged.h"
#include "kernels/cuda_check.cuh"
#include "kernels/gemm.cuh"
#include "kernels/gemv.cuh"
#include "kernels/weight_format.h"

namespace soartune::engine::cuda {

// "<statement> failed at <file>:<line>: <error>" as an Internal status.
#define SOARTUNE_CUDA_TRY(stmt)                                                                        \
  do {                                                                                                 \
    cudaError_t soartune_e_ = (stmt);                                                                  \
    if (soartune_e_ != cudaSuccess)                                                                    \
      return ::soartune::Status::Internal(                                                     \
          ::soartune::kernels::cuda_error_message(soartune_e_, #stmt, __FILE__, __LINE__));            \
  } while (0)

struct CudaLayer {
  kernels::DeviceLinear qkv;       // [q_dim + 2 kv_dim][hidden]
  kernels::DeviceLinear o;         // [hidden][q_dim]
  kernels::DeviceLinear gate_up;   // [2 intermediate][hidden]: gate rows first, or interleaved by 8
  bool gate_up_interleaved = false; // kernels::interleave_gate_up order (intermediate % 8 == 0): the decode
                                    // GEMV applies SwiGLU in its epilogue
  kernels::DeviceLinear down;      // [hidden][intermediate]
  float* attn_norm = nullptr;      // [hidden]
  float* mlp_norm = nullptr;       // [hidden]
  float* qkv_bias = nullptr;       // [q_dim + 2 kv_dim] or null
};

// What the weights of a synthetic device model are made of.
struct SyntheticSpec {
  kernels::WeightFormat format = kernels::WeightFormat::kBf16;
  int group = 128;                 // quantised formats; 0 = per output channel
  uint64_t seed = 1;
  kernels::WeightFormat lm_head_format = kernels::WeightFormat::kBf16;  // bf16, int8 or int4 (groups of `group`)
};

struct CudaOptions {
  kernels::KvCacheDtype kv_dtype = kernels::KvCacheDtype::kBf16;
  int page_size = 16;
  int kv_pages = 0;                // 0 = enough for max_sequences * max_context, within mem_fraction_pct
  int mem_fraction_pct = 85;
  int max_sequences = 1;
  int max_step_tokens = 1;
  int max_output_rows = 1;
  int max_context = 1;
  std::string gemv_variant = "auto";
  int decode_kv_splits = 0;
  int prefill_attn_block = 128;
  bool cuda_graphs = true;
  int cuda_graph_max_bs = 32;
};

class CudaModel {
 public:
  CudaModel() = default;
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  // Picks the device, creates the stream and cuBLAS handle.
  Status init(int device_index);
  // Weights from the host canonical form (repacked: fused projections, 4-bit packed).
  Status upload(const ModelWeights& w);
  // Weights generated on the device (random, deterministic in spec.seed), shaped like `config`.
  Status generate(const ModelConfig& config, const SyntheticSpec& spec);
  // Allocates KV pages and step buffers, plans every kernel, captures decode graphs.
  Status prepare(const CudaOptions& opt);

  Status forward(const Step& step, StepOutput& out);
  // Benchmarks: runs `step` without graphs, with device events between the stages, and returns the
  // device time of each stage summed over layers (ms), in first-seen order.
  Status profile_step(const Step& step, std::vector<std::pair<std::string, double>>* stages);
  // Benchmarks: replays the decode graph of `batch` `reps` times back to back on the inputs of the last
  // forward() and returns the device time per replay (ms): the step without the host's copies and sync.
  Status replay_graph(int batch, int reps, double* ms_per_step);
  // Benchmarks: every KV page of every layer filled with random finite values (as if prefilled).
  Status fill_kv_random(uint64_t seed);

  int kv_pages() const { return num_pages_; }
  std::size_t peak_memory_bytes() const;
  std::string device_name() const { return device_name_; }
  const ModelConfig& config() const { return cfg_; }
  cudaStream_t stream() const { return stream_; }
  // Bytes of weights one decode step reads (all linears, lm_head, norms).
  std::size_t weight_bytes() const { return weight_bytes_; }
  std::string describe_plan() const;

 private:
  struct Staging;  // host layout of the per-step inputs
  Status alloc(void** p, size_t bytes);
  // interleave_gate_up: parts are {gate, up}; their rows go in kernels::interleave_gate_up order.
  Status upload_linear(const std::vector<const QuantizedLinear*>& parts, kernels::DeviceLinear* out,
                       bool interleave_gate_up = false);
  // y = x W^T: fp32, or bf16 when out_bf16 (qkv and gate|up, read only by RoPE and SwiGLU); accumulate:
  // y += x W^T (o and down add themselves into the fp32 residual stream).
  // swiglu: w is an interleaved gate|up and y = bf16 silu(gate) * up [rows][n / 2] (GEMV rows only).
  // norm_gamma: x is ignored and the GEMV applies RMSNorm(residual_) * norm_gamma itself (norm_fusable()).
  Status linear(const kernels::DeviceLinear& w, const void* x, void* y, int rows, bool out_bf16 = false,
                bool accumulate = false, bool swiglu = false, const float* norm_gamma = nullptr);
  // Whether `rows` rows through w take the GEMV (fused dequantisation, tensor cores) or the GEMM (cuBLAS,
  // quantised weights expanded to bf16 first): gemv_max_rows() in cuda_model.cc.
  static bool use_gemv(const kernels::DeviceLinear& w, int rows);
  // Whether the GEMV of `rows` rows of w runs the pipelined form, which stages RMSNorm(residual_) itself.
  bool norm_fusable(const kernels::DeviceLinear& w, int rows) const;
  Status run_layers(int T, bool decode_only, int batch, int max_q_len, int max_seq_len, int rows_out);
  Status capture_graph(int batch);
  Status copy_inputs(const Step& step, bool decode_only, int* max_q_len, int* max_seq_len);

  ModelConfig cfg_;
  CudaOptions opt_;
  int device_ = 0;
  std::string device_name_;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  kernels::GemmContext gemm_;
  std::vector<void*> allocations_;
  std::size_t allocated_bytes_ = 0;
  std::size_t weight_bytes_ = 0;
  mutable std::size_t peak_used_ = 0;

  // weights
  void* embed_ = nullptr;          // bf16 [vocab][hidden]
  std::vector<CudaLayer> layers_;
  float* final_norm_ = nullptr;
  kernels::DeviceLinear lm_head_;
  bool have_weights_ = false;

  // KV: per layer K and V, [num_pages + 1][kv_heads][page_size][head_dim]; the last page is scratch.
  int num_pages_ = 0;
  int block_stride_ = 0;           // block-table entries per sequence
  std::vector<void*> k_cache_, v_cache_;

  // step buffers (device)
  int32_t* d_inputs_ = nullptr;    // one allocation, sections below
  int32_t *d_tokens_ = nullptr, *d_positions_ = nullptr, *d_kv_slot_ = nullptr, *d_seq_lens_ = nullptr,
          *d_q_offsets_ = nullptr, *d_prefix_lens_ = nullptr, *d_out_rows_ = nullptr, *d_block_table_ = nullptr,
          *d_argmax_ = nullptr;
  int32_t* h_inputs_ = nullptr;    // pinned mirror of d_inputs_
  size_t inputs_words_ = 0;
  float* residual_ = nullptr;      // [T][hidden]
  void* xn_ = nullptr;             // bf16 [T][max(hidden, intermediate)]
  void* wide_ = nullptr;           // bf16 [T][max(qkv, 2 intermediate)] (qkv, then gate|up)
  void* q_ = nullptr;              // bf16 [T][q_dim]
  void* attn_ = nullptr;           // bf16 [T][q_dim]
  float* logits_ = nullptr;        // [R][vocab]
  int32_t* h_argmax_ = nullptr;    // pinned [R]
  void* attn_workspace_ = nullptr;
  size_t attn_workspace_bytes_ = 0;
  void* cublas_workspace_ = nullptr;

  void mark(const char* stage);
  bool profiling_ = false;
  std::vector<cudaEvent_t> prof_events_;
  std::vector<const char*> prof_names_;
  size_t prof_n_ = 0;
  bool force_eager_ = false;

  std::map<int, cudaGraphExec_t> graphs_;  // decode batch -> graph
  bool capturing_ = false;
};

}  // namespace soartune::engine::cuda
