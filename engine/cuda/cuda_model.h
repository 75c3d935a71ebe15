// The CUDA decoder: device weights (fused qkv and gate|up, repacked), the paged KV cache in its dtype, every
// step buffer, and one forward pass per engine Step. Decode steps of up to cuda_graph_max_bs sequences replay
// CUDA graphs captured in prepare(); nothing in forward() allocates.
//
// Per layer: rmsnorm(+residual) -> qkv linear -> mixer -> o linear -> rmsnorm(+residual) -> gate|up linear ->
//   SwiGLU -> down linear. Linears of few rows (bf16 weights: <= 8, quantised: <= 32; gemv_max_rows() in
// cuda_model.cc) run the tensor-core GEMV (kernels/gemv.cuh); int4 / int8 layers up to 64 rows (kQgemmEngineMaxRows)
// run the quantised-weight GEMM (kernels/qgemm.cuh); more rows run cuBLAS (kernels/gemm.cuh). The mixer, by cfg.mixer(l):
//   softmax:   RoPE (or NoPE) + KV write -> paged attention (InfLLM-v2 sparse attention from dense_len on,
//              engine/cuda/sparse_layer.h) -> [output gate: attn * sigmoid(gate)]
//   lightning: q/k norm + RoPE -> Simple GLA over the layer's per-slot states (kernels/lightning.cuh) ->
//              output RMSNorm over all heads * sigmoid(z)
// The output gate's (or z's) rows are fused into the qkv projection after v. MiniCPM-SALA's muP scalings:
// see stream_scale_ in cuda_model.cc.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <compare>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/worker_result.h"
#include "engine/backend.h"
#include "engine/cuda/sparse_layer.h"
#include "engine/cuda/staged_upload.h"
#include "engine/cuda/step_observer.h"
#include "engine/model_config.h"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_paged.h"
#include "kernels/attention_prefill.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/gemm.cuh"
#include "kernels/qgemm.cuh"
#include "kernels/gemv.cuh"
#include "kernels/lightning.cuh"
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
  MixerKind kind = MixerKind::kSoftmax;
  kernels::DeviceLinear qkv;       // [q_dim + 2 kv_dim (+ q_dim gate rows when has_gate)][hidden], the layer's
                                   // own q/kv widths (ModelConfig::layer_q_dim)
  bool has_gate = false;           // output gate (softmax o_gate, lightning z_proj) rows after v in qkv
  kernels::DeviceLinear o;         // [hidden][q_dim]
  kernels::DeviceLinear gate_up;   // [2 intermediate][hidden]: gate rows first, or interleaved by 8
  bool gate_up_interleaved = false; // kernels::interleave_gate_up order (intermediate % 8 == 0): the decode
                                    // GEMV applies SwiGLU in its epilogue
  kernels::DeviceLinear down;      // [hidden][intermediate]
  float* attn_norm = nullptr;      // [hidden]
  float* mlp_norm = nullptr;       // [hidden]
  float* qkv_bias = nullptr;       // [q_dim + 2 kv_dim] or null
  float* q_norm = nullptr;         // lightning: [lightning_head_dim] per-head q/k RMSNorm gammas, or null
  float* k_norm = nullptr;
  float* o_norm = nullptr;         // lightning: [lightning_q_dim] output RMSNorm gamma, or null
};

// Weights already on the device, made there by the caller (the bench generates synthetic ones): adopt() takes
// ownership of `allocations` (cudaMalloc'd; every pointer below lies in one of them).
struct DeviceWeights {
  void* embed = nullptr;           // bf16 [vocab][hidden]
  std::vector<CudaLayer> layers;
  float* final_norm = nullptr;     // [hidden]
  kernels::DeviceLinear lm_head;
  std::vector<void*> allocations;
  std::size_t allocated_bytes = 0;
  std::size_t weight_bytes = 0;    // bytes of the linears and lm_head (codes and scales)
};

// The linear layers of a step, by role (their plans are cached and reported by role).
enum class LinearOp { kQkv, kO, kGateUp, kDown, kLmHead };

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
  // Lightning layers (MiniCPM-SALA): the per-slot state's dtype and the prefill chunk.
  kernels::LightningStateDtype lightning_state_dtype = kernels::LightningStateDtype::kFp32;
  int lightning_chunk = 64;
  // Softmax layers (MiniCPM-SALA): InfLLM-v2 sparse attention from the model's dense_len on, the launch's
  // top-k / window over its sparse_config (0 = the model's); engine/cuda/sparse_layer.h.
  bool sparse_attention = false;
  int sparse_topk = 0;
  int sparse_window = 0;
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
  // Weights made on the device by the caller, shaped like `config` (DeviceWeights).
  Status adopt(const ModelConfig& config, DeviceWeights weights);
  // Allocates KV pages and step buffers, plans every kernel for every step shape the options allow (once:
  // launches reuse the plans), captures decode graphs.
  Status prepare(const CudaOptions& opt);

  Status forward(const Step& step, StepOutput& out);
  // While an observer is set, forward() runs every step eagerly (no graph) and tells it where each stage
  // ends on the stream (null: none).
  void set_step_observer(StepObserver* observer) { observer_ = observer; }
  // Launches the decode graph captured for `batch` on stream() on the inputs of the last forward(), without
  // copies or a sync (the bench times replays back to back).
  Status launch_decode_graph(int batch);
  // The KV cache of layer l (K and V: kv_cache_bytes() each, opt.kv_dtype), as prepare() allocated it; null
  // for a lightning layer (it keeps no KV).
  void* k_cache(int l) const { return k_cache_[l]; }
  void* v_cache(int l) const { return v_cache_[l]; }
  std::size_t kv_cache_bytes() const;
  // Bytes of the lightning states of all lightning layers and max_sequences slots (0 without lightning layers),
  // allocated in prepare() before the KV pages are sized; one decode step reads and writes the states of its
  // sequences: lightning_state_bytes_per_slot() each.
  std::size_t lightning_state_bytes() const { return state_bytes_; }
  std::size_t lightning_state_bytes_per_slot() const;
  // Sparse attention's compressed keys (all softmax layers and slots) and workspace, allocated in prepare()
  // before the KV pages are sized; 0 while the softmax layers stay dense.
  std::size_t sparse_attention_bytes() const { return sparse_.compressed_key_bytes() + sparse_.workspace_bytes(); }
  // The kernel plans prepare() made: GEMV variant and grid per linear and row count, the cuBLAS rows,
  // decode attention's splits per batch, prefill attention's tiles.
  std::vector<KernelPlan> kernel_plans() const;

  int kv_pages() const { return num_pages_; }
  std::size_t peak_memory_bytes() const;
  std::string device_name() const { return device_name_; }
  const ModelConfig& config() const { return cfg_; }
  const CudaOptions& options() const { return opt_; }
  cudaStream_t stream() const { return stream_; }
  // Bytes of weights one decode step reads: every linear and lm_head, codes and scales (the embedding rows a
  // step gathers and the norm vectors are not counted).
  std::size_t weight_bytes() const { return weight_bytes_; }

 private:
  struct Staging;  // host layout of the per-step inputs
  Status alloc(void** p, size_t bytes);
  // One device linear of `parts` (engine/linear_layout.h), copied through `up`. interleave_gate_up: parts are
  // {gate, up}; their rows go in kernels::interleave_gate_up order.
  Status upload_linear(StagedUpload& up, const std::vector<const QuantizedLinear*>& parts, kernels::DeviceLinear* out,
                       bool interleave_gate_up = false);
  // y = x W^T: fp32, or bf16 when out_bf16 (qkv and gate|up, read only by RoPE and SwiGLU); accumulate:
  // y += x W^T (o and down add themselves into the fp32 residual stream).
  // swiglu: w is an interleaved gate|up and y = bf16 silu(gate) * up [rows][n / 2] (GEMV rows only).
  // norm_gamma: x is ignored and the GEMV applies RMSNorm(residual_) * norm_gamma itself (norm_fusable()).
  Status linear(LinearOp op, const kernels::DeviceLinear& w, const void* x, void* y, int rows,
                bool out_bf16 = false, bool accumulate = false, bool swiglu = false, const float* norm_gamma = nullptr);
  // Which path `rows` rows through w take: the GEMV (fused dequantisation, tensor cores) up to gemv_max_rows()
  // in cuda_model.cc; above it, int4 / int8 weights up to kQgemmEngineMaxRows take the quantised-weight GEMM
  // (kernels/qgemm.cuh, dequantised in shared memory); the rest take cuBLAS (kernels/gemm.cuh), quantised and
  // fp16 weights expanded to bf16 first.
  static bool use_gemv(const kernels::DeviceLinear& w, int rows);
  static bool use_qgemm(const kernels::DeviceLinear& w, int rows);
  // The GEMV plan of `rows` rows of w in role op (planned once, in prepare(), then looked up), and whether it
  // stages RMSNorm(residual_) itself (the pipelined form, for qkv and gate|up).
  struct GemvKey {
    LinearOp op;
    kernels::WeightFormat format;
    int group;
    int n, k;                      // a role may have several shapes (MiniCPM-SALA: lightning and softmax qkv)
    int rows;
    bool swiglu;
    auto operator<=>(const GemvKey&) const = default;
  };
  struct GemvChoice {
    kernels::GemvPlan plan;
    bool norm_fused = false;
  };
  Status gemv_choice(LinearOp op, const kernels::DeviceLinear& w, int rows, bool swiglu, const GemvChoice** out);
  // Whether the step's RMSNorm before w (qkv or gate|up) is fused into its GEMV.
  bool norm_fused(LinearOp op, const kernels::DeviceLinear& w, int rows, bool swiglu);
  void stage_end(const char* stage) {
    if (observer_ && !capturing_) observer_->stage_end(stage, stream_);
  }
  Status prepare_lightning();        // states, decays, workspace, shape checks (nothing without lightning layers)
  Status prepare_attention_plans();  // the softmax layers' attention plans and shape checks
  // lightning_run's arguments for lightning layer l on a step of `batch` sequences, the longest max_q_len.
  kernels::LightningArgs lightning_args(int l, int batch, int max_q_len) const;
  Status run_layers(int T, bool decode_only, int batch, int max_q_len, int max_seq_len, int rows_out);
  // Layer l's token mixer on the step's qkv projection (wide_); *o_in: the bf16 rows the o projection reads.
  Status softmax_mixer(int l, int T, bool decode_only, int batch, int max_q_len, int max_seq_len, const void** o_in);
  Status lightning_mixer(int l, int T, int batch, int max_q_len, const void** o_in);
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
  // muP (cuda_model.cc, prepare()): the residual stream holds h / stream_scale_, normalised with stream_eps_.
  float stream_scale_ = 1.f;
  float stream_eps_ = 1e-5f;
  float* final_gamma_ = nullptr;   // final_norm_ / logit_divisor (final_norm_ itself when the divisor is 1)

  // Lightning: [lightning layers][max_sequences][heads][d][d] in opt_.lightning_state_dtype, the per-head
  // log-decays, the chunked form's scratch.
  void* state_ = nullptr;
  std::size_t state_bytes_ = 0;
  float* log_decay_ = nullptr;     // [lightning_heads]
  void* lightning_workspace_ = nullptr;
  std::size_t lightning_workspace_bytes_ = 0;
  float* light_out_ = nullptr;     // fp32 [T][lightning_q_dim]
  int first_softmax_ = -1;         // a softmax layer (its KV arrays serve the attention plans), -1: none
  SparseAttentionLayers sparse_;   // the softmax layers' sparse attention (inactive: dense)

  // KV: per layer K and V, [num_pages + 1][kv_heads][page_size][head_dim]; the last page is scratch.
  int num_pages_ = 0;
  int block_stride_ = 0;           // block-table entries per sequence
  std::vector<void*> k_cache_, v_cache_;

  // step buffers (device)
  int32_t* d_inputs_ = nullptr;    // one allocation, sections below
  int32_t *d_tokens_ = nullptr, *d_positions_ = nullptr, *d_kv_slot_ = nullptr, *d_seq_lens_ = nullptr,
          *d_q_offsets_ = nullptr, *d_prefix_lens_ = nullptr, *d_out_rows_ = nullptr, *d_block_table_ = nullptr,
          *d_argmax_ = nullptr, *d_seq_slots_ = nullptr;
  int32_t* h_inputs_ = nullptr;    // pinned mirror of d_inputs_
  size_t inputs_words_ = 0;
  float* residual_ = nullptr;      // [T][hidden]
  float* capture_ = nullptr;       // host [layers + 1][T][hidden] while an eager step copies its residual stream out
  void* xn_ = nullptr;             // bf16 [T][max(hidden, intermediate)]
  void* wide_ = nullptr;           // bf16 [T][max(qkv, 2 intermediate)] (qkv, then gate|up)
  void* q_ = nullptr;              // bf16 [T][q_dim]; after attention, the gated output of a gated softmax layer
  void* attn_ = nullptr;           // bf16 [T][max q_dim of any layer]
  float* logits_ = nullptr;        // [R][vocab]
  int32_t* h_argmax_ = nullptr;    // pinned [R]
  void* attn_workspace_ = nullptr;
  size_t attn_workspace_bytes_ = 0;
  void* cublas_workspace_ = nullptr;
  float* qgemm_workspace_ = nullptr;  // the quantised-weight GEMM's k-slice partials (widest use_qgemm call)
  size_t qgemm_workspace_bytes_ = 0;

  // plans, made in prepare() for every shape a step can take, looked up at launch
  std::map<GemvKey, GemvChoice> gemv_plans_;
  std::vector<kernels::DecodeAttentionPlan> decode_plans_;  // [batch]: decode steps plan for max_context
  std::map<std::pair<int, int>, kernels::PrefillAttentionPlan> prefill_plans_;  // (batch, max_q_len)
  kernels::PrefillAttentionArgs prefill_shape_;  // the widest prefill step prepare() checked (for the report)

  StepObserver* observer_ = nullptr;
  std::map<int, cudaGraphExec_t> graphs_;  // decode batch -> graph
  bool capturing_ = false;
};

}  // namespace soartune::engine::cuda
