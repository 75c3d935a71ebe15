// InfLLM-v2 sparse attention (MiniCPM-SALA's softmax layers above sparse_config.dense_len) in the CUDA
// decoder: the compressed keys each softmax layer keeps per sequence slot, the kernel plans, and the call
// that replaces paged attention in a softmax layer (kernels/sparse_attention.cuh does the work).
//
// It runs when launch.sparse_attention is on, the model has a sparse_config and softmax layers, and a context
// can reach dense_len (max_context >= dense_len): the CPU backend's rule. launch.sparse_topk / sparse_window
// (0 = the model's) replace the config's topk / window_size, as on the CPU; the window must be whole blocks.
// The switch to the selection is per query token inside the kernels (p + 1 >= dense_len, and the selection
// keeps fewer blocks than there are), as on the CPU, so results do not depend on how a prompt is chunked:
//   decode steps always take the sparse kernels (a token below dense_len attends its whole context through
//     them), so one captured graph serves every context length;
//   a prefill chunk takes them when one of its sequences reaches dense_len; a chunk wholly below dense_len
//     only appends its compressed keys and the dense prefill kernel attends.
// Memory: fp32 compressed keys [max_sequences][kv_heads][compressed(max_context)][head_dim] per softmax layer
// and one workspace (the widest decode or prefill step), both allocated in prepare() through the model's
// allocator before the KV pages are sized, so the pages take what they leave.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/status.h"
#include "core/worker_result.h"
#include "engine/model_config.h"
#include "kernels/sparse_attention.cuh"

namespace soartune::engine::cuda {

// The selection's parameters for a plan: nullopt when its softmax layers stay dense (sparse attention off,
// no sparse_config, no softmax layer, or max_context below dense_len). topk / window: the launch knobs.
Result<std::optional<kernels::SparseParams>> sparse_params_for(const ModelConfig& c, bool sparse_attention, int topk,
                                                               int window, int max_context);

// The step inputs and shapes the sparse kernels share with paged attention (cuda_model.h's step buffers).
struct SparseLayerShape {
  int max_sequences = 1;
  int max_step_tokens = 1;
  int max_context = 1;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int page_size = 0;
  int block_table_stride = 0;
  kernels::KvCacheDtype kv_dtype = kernels::KvCacheDtype::kBf16;
  int sm_count = 1;
  const int32_t* block_table = nullptr;  // device [max_sequences][block_table_stride]
  const int32_t* q_offsets = nullptr;    // device [batch + 1]
  const int32_t* prefix_lens = nullptr;  // device [batch]
  const int32_t* seq_slots = nullptr;    // device [batch]: each sequence's slot (its compressed keys)
};

class SparseAttentionLayers {
 public:
  using Alloc = std::function<Status(void**, std::size_t)>;

  // Allocates the compressed keys of every softmax layer (cfg.mixer(l) == kSoftmax) and the workspace, and
  // plans decode steps of 1..max_sequences sequences at max_context. Nothing when sp is nullopt.
  Status prepare(const ModelConfig& cfg, const std::optional<kernels::SparseParams>& sp, const SparseLayerShape& shape,
                 const Alloc& alloc);
  bool active() const { return active_; }

  // Softmax layer l's attention of a step: q [T][n_heads][head_dim] bf16 -> out (same shape, bf16), over its
  // paged caches. Appends the step's compressed keys; *attended false: the chunk is wholly below dense_len and
  // the caller attends densely (the prefill kernel). decode: every sequence one token (max_seq_len is then
  // max_context, the graphs' plan).
  Status run(int l, const void* q, void* out, const void* k_cache, const void* v_cache, int T, bool decode, int batch,
             int max_q_len, int max_seq_len, cudaStream_t stream, bool* attended);

  // Device bytes held: compressed keys of all softmax layers and slots, and the workspace.
  std::size_t compressed_key_bytes() const { return ck_bytes_; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }
  // One entry ("attention.sparse"): the selection parameters, the decode plans' splits, the bytes.
  std::vector<KernelPlan> kernel_plans() const;

 private:
  kernels::SparseAttentionArgs args(int l, const void* q, void* out, const void* k_cache, const void* v_cache, int T,
                                    int batch, int max_q_len, int max_seq_len) const;

  bool active_ = false;
  kernels::SparseParams sp_;
  SparseLayerShape shape_;
  int ck_capacity_ = 0;                      // compressed keys a slot holds
  std::vector<float*> ck_;                   // [layer]: null for lightning layers
  void* workspace_ = nullptr;
  std::size_t ck_bytes_ = 0, workspace_bytes_ = 0;
  std::vector<kernels::SparseAttentionPlan> decode_plans_;  // [batch]
};

}  // namespace soartune::engine::cuda
