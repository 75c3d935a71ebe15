#include "engine/cuda/sparse_layer.h"

#include <algorithm>
#include <string>

#include "engine/sparse_attention.h"
#include "kernels/cuda_check.cuh"

namespace soartune::engine::cuda {

namespace kn = soartune::kernels;

Result<std::optional<kn::SparseParams>> sparse_params_for(const ModelConfig& c, bool sparse_attention, int topk,
                                                          int window, int max_context) {
  // The knobs over the model's sparse_config as the CPU backend applies them, and nothing to do unless a
  // context can reach dense_len.
  auto launch_sparse = sparse_config_for_launch(c.sparse, topk, window);
  if (!launch_sparse.ok()) return launch_sparse.status();
  const SparseAttentionConfig& sc = launch_sparse.value();
  if (!sparse_attention || !sc.present || c.softmax_layers() == 0 || max_context < sc.dense_len)
    return std::optional<kn::SparseParams>();
  return std::optional<kn::SparseParams>(sparse_params(sc));
}

kn::SparseAttentionArgs SparseAttentionLayers::args(int l, const void* q, void* out, const void* k_cache,
                                                    const void* v_cache, int T, int batch, int max_q_len,
                                                    int max_seq_len) const {
  kn::PagedLayer paged;
  paged.q = q;
  paged.out = out;
  paged.k_cache = k_cache;
  paged.v_cache = v_cache;
  paged.block_table = shape_.block_table;
  paged.batch = batch;
  paged.n_heads = shape_.n_heads;
  paged.n_kv_heads = shape_.n_kv_heads;
  paged.head_dim = shape_.head_dim;
  paged.page_size = shape_.page_size;
  paged.block_table_stride = shape_.block_table_stride;
  paged.kv_dtype = shape_.kv_dtype;
  auto a = kn::paged_attention_args<kn::SparseAttentionArgs>(paged);
  a.q_offsets = shape_.q_offsets;
  a.prefix_lens = shape_.prefix_lens;
  a.ck = ck_[size_t(l)];
  a.ck_slots = shape_.seq_slots;
  a.ck_capacity = ck_capacity_;
  a.total_q = T;
  a.max_q_len = max_q_len;
  a.max_context = max_seq_len;
  a.act_dtype = kn::ActDtype::kBf16;
  a.sp = sp_;
  return a;
}

Status SparseAttentionLayers::prepare(const ModelConfig& cfg, const std::optional<kn::SparseParams>& sp,
                                      const SparseLayerShape& shape, const Alloc& alloc) {
  active_ = sp.has_value();
  ck_.assign(size_t(cfg.layers), nullptr);
  decode_plans_.clear();
  ck_bytes_ = workspace_bytes_ = 0;
  workspace_ = nullptr;
  if (!active_) return Status::Ok();
  sp_ = *sp;
  shape_ = shape;
  ck_capacity_ = std::max(1, kn::sparse_compressed_keys(shape.max_context, sp_));
  const size_t per_layer =
      size_t(shape.max_sequences) * shape.n_kv_heads * size_t(ck_capacity_) * shape.head_dim * sizeof(float);
  int first = -1;
  for (int l = 0; l < cfg.layers; ++l) {
    if (cfg.mixer(l) != MixerKind::kSoftmax) continue;
    void* p = nullptr;
    Status s = alloc(&p, per_layer);
    if (!s.ok()) return s;
    // Zeros: a slot's windows are written before any query reads them; zeros only keep a never-filled slot (a
    // benchmark's decode over random KV) from feeding NaN bit patterns to the scores.
    if (cudaMemset(p, 0, per_layer) != cudaSuccess)
      return Status::Internal(kn::cuda_error_message(cudaGetLastError(), "cudaMemset(compressed keys)", __FILE__, __LINE__));
    ck_[size_t(l)] = static_cast<float*>(p);
    ck_bytes_ += per_layer;
    if (first < 0) first = l;
  }
  // Plans depend on shapes only: the first layer's compressed keys stand in for the caches (checked for
  // alignment, never read); each launch passes its layer's own.
  const void* stand_in = ck_[size_t(first)];
  auto refuse = [](const std::string& e) {
    return Status::Invalid("launch.sparse_attention: the CUDA sparse attention kernels cannot run this plan (" + e +
                           "); set launch.sparse_attention false for dense attention at every length");
  };
  // Decode steps: 1..max_sequences tokens at max_context (a captured graph replays at any context).
  decode_plans_.assign(size_t(shape.max_sequences) + 1, {});
  for (int b = 1; b <= shape.max_sequences; ++b) {
    const kn::SparseAttentionArgs a = args(first, stand_in, const_cast<void*>(stand_in), stand_in, stand_in, b, b, 1,
                                           shape.max_context);
    const std::string e = kn::sparse_attention_plan(a, shape.sm_count, 0, &decode_plans_[size_t(b)]);
    if (!e.empty()) return refuse(e);
    workspace_bytes_ = std::max(workspace_bytes_, decode_plans_[size_t(b)].workspace_bytes);
  }
  // Prefill: the widest chunk with one split (every workspace section grows with tokens and context; run()
  // falls back to one split when a step's chosen splits would not fit).
  {
    const int T = shape.max_step_tokens;
    const kn::SparseAttentionArgs a = args(first, stand_in, const_cast<void*>(stand_in), stand_in, stand_in, T,
                                           std::min(shape.max_sequences, T), T, shape.max_context);
    kn::SparseAttentionPlan plan;
    const std::string e = kn::sparse_attention_plan(a, shape.sm_count, 1, &plan);
    if (!e.empty()) return refuse(e);
    workspace_bytes_ = std::max(workspace_bytes_, plan.workspace_bytes);
  }
  return alloc(&workspace_, workspace_bytes_);
}

Status SparseAttentionLayers::run(int l, const void* q, void* out, const void* k_cache, const void* v_cache, int T,
                                  bool decode, int batch, int max_q_len, int max_seq_len, cudaStream_t stream,
                                  bool* attended) {
  *attended = false;
  if (!active_ || l < 0 || l >= int(ck_.size()) || !ck_[size_t(l)])
    return Status::Internal("sparse attention: layer " + std::to_string(l) + " has no compressed keys");
  const kn::SparseAttentionArgs a = args(l, q, out, k_cache, v_cache, T, batch, max_q_len, max_seq_len);
  const kn::SparseAttentionPlan* plan = nullptr;
  kn::SparseAttentionPlan step_plan;
  if (decode) {
    if (batch < 1 || batch >= int(decode_plans_.size()) || T != batch || max_seq_len != shape_.max_context)
      return Status::Internal("sparse attention: no decode plan for batch " + std::to_string(batch) + " at context " +
                              std::to_string(max_seq_len));
    plan = &decode_plans_[size_t(batch)];
  } else {
    std::string e = kn::sparse_attention_plan(a, shape_.sm_count, 0, &step_plan);
    if (e.empty() && step_plan.workspace_bytes > workspace_bytes_)
      e = kn::sparse_attention_plan(a, shape_.sm_count, 1, &step_plan);
    if (!e.empty()) return Status::Internal("sparse attention: " + e);
    if (step_plan.workspace_bytes > workspace_bytes_)
      return Status::Internal("sparse attention: workspace " + std::to_string(step_plan.workspace_bytes) +
                              " exceeds the " + std::to_string(workspace_bytes_) + " bytes planned");
    plan = &step_plan;
  }
  // A prefill chunk whose sequences all stay below dense_len: every query is dense, the prefill kernel is
  // faster at that; only the compressed keys are kept up.
  const bool below = !decode && max_seq_len < sp_.dense_len;
  const cudaError_t err = kn::sparse_attention_run(a, *plan, workspace_, stream, below ? kn::kSparseCompress : kn::kSparseAll);
  if (err != cudaSuccess)
    return Status::Internal(kn::cuda_error_message(err, "sparse_attention_run", __FILE__, __LINE__));
  *attended = !below;
  return Status::Ok();
}

std::vector<KernelPlan> SparseAttentionLayers::kernel_plans() const {
  if (!active_) return {};
  std::string splits;
  for (size_t b = 1; b < decode_plans_.size(); ++b) {
    if (b > 1) splits += ',';
    splits += std::to_string(decode_plans_[b].splits);
  }
  return {{"attention.sparse",
           "heads " + std::to_string(shape_.n_heads) + "/" + std::to_string(shape_.n_kv_heads) + " head_dim " +
               std::to_string(shape_.head_dim) + " context " + std::to_string(shape_.max_context) + " slots " +
               std::to_string(shape_.max_sequences),
           {{"dense_len", std::to_string(sp_.dense_len)},
            {"block_size", std::to_string(sp_.block_size)},
            {"topk", std::to_string(sp_.topk)},
            {"window", std::to_string(sp_.window_size)},
            {"init_blocks", std::to_string(sp_.init_blocks)},
            {"decode_splits", splits},
            {"compressed_key_bytes", std::to_string(ck_bytes_)},
            {"workspace_bytes", std::to_string(workspace_bytes_)}}}};
}

}  // namespace soartune::engine::cuda
