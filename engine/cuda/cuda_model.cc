#include "engine/cuda/cuda_model.h"

#include "core/knob_catalogue.h"

#include <cuda_bf16.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "core/kernel_variants.h"
#include "engine/cuda/staged_upload.h"
#include "engine/linear_layout.h"
#include "kernels/activation.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/norm.cuh"
#include "kernels/numeric_formats.h"
#include "kernels/rope.cuh"
#include "kernels/sampling.cuh"

namespace soartune::engine::cuda {

namespace kn = soartune::kernels;

#define SOARTUNE_KERNEL_TRY(expr)                                                                      \
  do {                                                                                                 \
    std::string soartune_m_ = (expr);                                                                  \
    if (!soartune_m_.empty()) return Status::Internal(std::string(#expr) + ": " + soartune_m_);        \
  } while (0)

#define SOARTUNE_STATUS_TRY(expr)         \
  do {                                    \
    Status soartune_s_ = (expr);          \
    if (!soartune_s_.ok()) return soartune_s_; \
  } while (0)

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

}  // namespace

CudaModel::~CudaModel() {
  for (auto& [bs, g] : graphs_) cudaGraphExecDestroy(g);
  if (cublas_) cublasDestroy(cublas_);
  for (void* p : allocations_) cudaFree(p);
  if (h_inputs_) cudaFreeHost(h_inputs_);
  if (h_argmax_) cudaFreeHost(h_argmax_);
  if (stream_) cudaStreamDestroy(stream_);
}

Status CudaModel::init(int device_index) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::Precondition("no CUDA device found");
  }
  if (device_index < 0 || device_index >= count)
    return Status::Invalid("device_index: " + std::to_string(device_index) + " is not in 0.." +
                           std::to_string(count - 1));
  device_ = device_index;
  SOARTUNE_CUDA_TRY(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  SOARTUNE_CUDA_TRY(cudaGetDeviceProperties(&prop, device_));
  if (prop.major < 8)
    return Status::Precondition(std::string("device ") + prop.name + " (sm_" + std::to_string(prop.major * 10 + prop.minor) +
                                ") is older than the sm_80 the tensor-core GEMV needs");
  sm_count_ = prop.multiProcessorCount;
  device_name_ = std::string(prop.name) + " (sm_" + std::to_string(prop.major * 10 + prop.minor) + ")";
  SOARTUNE_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS) return Status::Internal("cublasCreate failed");
  SOARTUNE_STATUS_TRY(alloc(&cublas_workspace_, kCublasWorkspace));
  if (cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return Status::Internal("cublasSetWorkspace failed");
  gemm_.cublas = cublas_;
  return Status::Ok();
}

Status CudaModel::alloc(void** p, size_t bytes) {
  bytes = (bytes + 255) / 256 * 256;
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return Status::Exhausted("cudaMalloc(" + std::to_string(bytes) + " bytes): out of device memory (" +
                             std::to_string(allocated_bytes_) + " bytes already held)");
  }
  SOARTUNE_CUDA_TRY(e);
  allocations_.push_back(*p);
  allocated_bytes_ += bytes;
  return Status::Ok();
}

// ---- weights ----

Status CudaModel::upload_linear(StagedUpload& up, const std::vector<const QuantizedLinear*>& parts,
                                kn::DeviceLinear* out, bool interleave_gate_up) {
  auto made = LinearLayout::make(parts, interleave_gate_up);
  if (!made.ok()) return made.status();
  const LinearLayout& layout = made.value();
  kn::DeviceLinear d;
  d.format = layout.format();
  d.n = layout.n();
  d.k = layout.k();
  d.group = layout.group();
  void* w = nullptr;
  SOARTUNE_STATUS_TRY(alloc(&w, layout.weight_bytes()));
  SOARTUNE_STATUS_TRY(up.copy_rows(w, d.n, layout.row_bytes(),
                                   [&](int r0, int r1, uint8_t* dst) { layout.write_rows(r0, r1, dst); }));
  d.w = w;
  weight_bytes_ += layout.weight_bytes();
  if (layout.scale_bytes() > 0) {
    void* s = nullptr;
    SOARTUNE_STATUS_TRY(alloc(&s, layout.scale_bytes()));
    SOARTUNE_STATUS_TRY(up.copy_rows(s, d.n, size_t(layout.scales_per_row()) * 4, [&](int r0, int r1, uint8_t* dst) {
      layout.write_scales(r0, r1, reinterpret_cast<float*>(dst));
    }));
    d.scales = static_cast<float*>(s);
    weight_bytes_ += layout.scale_bytes();
  }
  *out = d;
  return Status::Ok();
}

static Status upload_floats(const std::vector<float>& v, float** out,
                            const std::function<Status(void**, size_t)>& alloc) {
  void* p = nullptr;
  SOARTUNE_STATUS_TRY(alloc(&p, v.size() * 4));
  SOARTUNE_CUDA_TRY(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  *out = static_cast<float*>(p);
  return Status::Ok();
}

Status CudaModel::upload(const ModelWeights& w) {
  cfg_ = w.config;
  auto al = [this](void** p, size_t b) { return alloc(p, b); };
  // Through two pinned slices, filled by the host's threads (engine/cuda/staged_upload.h).
  StagedUpload up;
  SOARTUNE_STATUS_TRY(up.init(size_t(64) << 20, int(std::max(1u, std::min(16u, std::thread::hardware_concurrency())))));
  // Embedding rows are gathered as bf16.
  {
    const QuantizedLinear& e = w.embed;
    const size_t row = size_t(e.in);
    if (e.w16.size() != size_t(e.out) * row) return Status::Internal("weights: the embedding does not match its shape");
    SOARTUNE_STATUS_TRY(alloc(&embed_, e.w16.size() * 2));
    SOARTUNE_STATUS_TRY(up.copy_rows(embed_, e.out, row * 2, [&](int r0, int r1, uint8_t* dst) {
      uint16_t* o = reinterpret_cast<uint16_t*>(dst);
      const uint16_t* src = e.w16.data() + size_t(r0) * row;
      const size_t count = size_t(r1 - r0) * row;
      if (e.dtype16 != Dtype16::kFP16) {
        std::memcpy(o, src, count * 2);
        return;
      }
      for (size_t i = 0; i < count; ++i) o[i] = kn::f32_to_bf16(kn::fp16_to_f32(src[i]));
    }));
  }
  layers_.assign(w.layers.size(), {});
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    CudaLayer& D = layers_[l];
    D.kind = cfg_.mixer(int(l));
    // The output gate (softmax o_gate, lightning z_proj) reads the same normalised rows as q, k and v: its rows
    // go after v in the one projection.
    D.has_gate = L.w_out_gate.out > 0;
    if (D.has_gate) SOARTUNE_STATUS_TRY(upload_linear(up, {&L.wq, &L.wk, &L.wv, &L.w_out_gate}, &D.qkv));
    else SOARTUNE_STATUS_TRY(upload_linear(up, {&L.wq, &L.wk, &L.wv}, &D.qkv));
    if (!L.q_norm.empty()) SOARTUNE_STATUS_TRY(upload_floats(L.q_norm, &D.q_norm, al));
    if (!L.k_norm.empty()) SOARTUNE_STATUS_TRY(upload_floats(L.k_norm, &D.k_norm, al));
    if (!L.o_norm.empty()) SOARTUNE_STATUS_TRY(upload_floats(L.o_norm, &D.o_norm, al));
    SOARTUNE_STATUS_TRY(upload_linear(up, {&L.wo}, &D.o));
    D.gate_up_interleaved = L.w_gate.out % 8 == 0 && L.w_gate.out == L.w_up.out;
    SOARTUNE_STATUS_TRY(upload_linear(up, {&L.w_gate, &L.w_up}, &D.gate_up, D.gate_up_interleaved));
    SOARTUNE_STATUS_TRY(upload_linear(up, {&L.w_down}, &D.down));
    SOARTUNE_STATUS_TRY(upload_floats(L.attn_norm, &D.attn_norm, al));
    SOARTUNE_STATUS_TRY(upload_floats(L.mlp_norm, &D.mlp_norm, al));
    if (!L.wq.bias.empty()) {
      std::vector<float> b = L.wq.bias;
      b.insert(b.end(), L.wk.bias.begin(), L.wk.bias.end());
      b.insert(b.end(), L.wv.bias.begin(), L.wv.bias.end());
      SOARTUNE_STATUS_TRY(upload_floats(b, &D.qkv_bias, al));
    }
  }
  SOARTUNE_STATUS_TRY(upload_floats(w.final_norm, &final_norm_, al));
  SOARTUNE_STATUS_TRY(upload_linear(up, {&w.lm_head}, &lm_head_));
  SOARTUNE_STATUS_TRY(up.finish());
  have_weights_ = true;
  return Status::Ok();
}

Status CudaModel::adopt(const ModelConfig& c, DeviceWeights w) {
  if (have_weights_) return Status::Precondition("adopt: the model already holds weights");
  if (int(w.layers.size()) != c.layers || !w.embed || !w.final_norm || !w.lm_head.w)
    return Status::Invalid("adopt: the device weights do not match the config's " + std::to_string(c.layers) + " layers");
  for (int l = 0; l < c.layers; ++l)
    if (w.layers[size_t(l)].kind != c.mixer(l))
      return Status::Invalid("adopt: layer " + std::to_string(l) + "'s mixer differs from the config's");
  cfg_ = c;
  embed_ = w.embed;
  layers_ = std::move(w.layers);
  final_norm_ = w.final_norm;
  lm_head_ = w.lm_head;
  allocations_.insert(allocations_.end(), w.allocations.begin(), w.allocations.end());
  allocated_bytes_ += w.allocated_bytes;
  weight_bytes_ += w.weight_bytes;
  have_weights_ = true;
  return Status::Ok();
}

// ---- buffers, plans, graphs ----

Status CudaModel::prepare(const CudaOptions& opt) {
  if (!have_weights_) return Status::Precondition("prepare: no weights uploaded");
  opt_ = opt;
  const ModelConfig& c = cfg_;
  if (opt.max_sequences < 1 || opt.max_step_tokens < 1 || opt.max_output_rows < 1 || opt.max_context < 1)
    return Status::Invalid("plan: max_sequences, max_step_tokens, max_output_rows and max_context must be >= 1");
  if (opt.page_size < 1) return Status::Invalid("launch.kv_page_size: must be >= 1");
  // The closed sets the kernels implement (core/kernel_variants.h).
  if (opt.gemv_variant != core::kGemvAuto && core::gemv_variant_index(opt.gemv_variant) < 0)
    return Status::Invalid("launch.gemv_variant: " + opt.gemv_variant + " is not one of " +
                           core::gemv_variant_allowed());
  if (!core::prefill_attn_block_allowed(opt.prefill_attn_block))
    return Status::Invalid("launch.prefill_attn_block: " + std::to_string(opt.prefill_attn_block) +
                           " is not one of " + core::allowed_list(core::kPrefillAttnBlocks));
  if (!core::decode_kv_splits_allowed(opt.decode_kv_splits))
    return Status::Invalid("launch.decode_kv_splits: " + std::to_string(opt.decode_kv_splits) + " is not one of " +
                           core::allowed_list(core::kDecodeKvSplits));
  const int T = opt.max_step_tokens, S = opt.max_sequences, R = opt.max_output_rows;
  block_stride_ = (opt.max_context + opt.page_size - 1) / opt.page_size;

  // muP (MiniCPM): h0 = embed * scale_emb, h += r * branch on both branches of every layer, logits =
  // lm_head(norm(h) / divisor). The residual stream holds h / r instead: every o and down projection then adds
  // its branch unscaled (the weights stay as quantised, no alpha in the GEMV), the embedding is gathered times
  // scale_emb / r, and every RMSNorm of the stream uses eps / r^2, since x / sqrt(mean(x^2) + eps) is the same
  // for x = h / r with eps / r^2 -- exact in real arithmetic, fp32 rounding apart. The logit divisor is folded
  // into the final norm's gamma (gamma / divisor: one fp32 rounding a channel). Llama: r = 1, nothing changes.
  stream_scale_ = c.residual_scale;
  if (!(stream_scale_ > 0.f) || !(c.logit_divisor > 0.f) || !std::isfinite(c.embed_scale))
    return Status::Invalid("model: residual scale, logit divisor and embedding scale must be positive and finite");
  stream_eps_ = c.rms_eps / (stream_scale_ * stream_scale_);
  final_gamma_ = final_norm_;
  if (c.logit_divisor != 1.f) {
    std::vector<float> g(size_t(c.hidden));
    SOARTUNE_CUDA_TRY(cudaMemcpy(g.data(), final_norm_, g.size() * 4, cudaMemcpyDeviceToHost));
    for (float& x : g) x /= c.logit_divisor;
    auto al = [this](void** q, size_t b) { return alloc(q, b); };
    SOARTUNE_STATUS_TRY(upload_floats(g, &final_gamma_, al));
  }

  // Step buffers.
  int wide = 2 * c.intermediate, max_q_dim = 1;
  first_softmax_ = -1;
  for (int l = 0; l < c.layers; ++l) {
    wide = std::max(wide, layers_[size_t(l)].qkv.n);
    max_q_dim = std::max(max_q_dim, c.layer_q_dim(l));
    if (first_softmax_ < 0 && c.mixer(l) == MixerKind::kSoftmax) first_softmax_ = l;
  }
  const int narrow = std::max(c.hidden, c.intermediate);
  auto A = [&](void** p, size_t b) { return alloc(p, b); };
  SOARTUNE_STATUS_TRY(A(reinterpret_cast<void**>(&residual_), size_t(T) * c.hidden * 4));
  SOARTUNE_STATUS_TRY(A(&xn_, size_t(std::max(T, R)) * narrow * 2));
  SOARTUNE_STATUS_TRY(A(&wide_, size_t(T) * wide * 2));
  SOARTUNE_STATUS_TRY(A(&q_, size_t(T) * std::max(1, c.q_dim()) * 2));
  SOARTUNE_STATUS_TRY(A(&attn_, size_t(T) * max_q_dim * 2));
  SOARTUNE_STATUS_TRY(A(reinterpret_cast<void**>(&logits_), size_t(R) * c.vocab * 4));
  // Inputs: small sections first, then the block table, so one copy covers a step.
  const size_t small = size_t(3) * T + 3 * S + (S + 1) + R + R;
  inputs_words_ = small + size_t(S) * block_stride_;
  SOARTUNE_STATUS_TRY(A(reinterpret_cast<void**>(&d_inputs_), inputs_words_ * 4));
  SOARTUNE_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&h_inputs_), inputs_words_ * 4));
  SOARTUNE_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&h_argmax_), size_t(R) * 4));
  int32_t* p = d_inputs_;
  d_tokens_ = p, p += T;
  d_positions_ = p, p += T;
  d_kv_slot_ = p, p += T;
  d_seq_lens_ = p, p += S;
  d_prefix_lens_ = p, p += S;
  d_seq_slots_ = p, p += S;
  d_q_offsets_ = p, p += S + 1;
  d_out_rows_ = p, p += R;
  d_argmax_ = p, p += R;
  d_block_table_ = p;
  SOARTUNE_CUDA_TRY(cudaMemset(d_inputs_, 0, inputs_words_ * 4));

  // Layers that a step's rows send through cuBLAS (use_gemv) and that need a bf16 copy first (quantised, fp16)
  // share one scratch buffer for it.
  size_t scratch = 0;
  auto needs_copy = [&](const kn::DeviceLinear& d) {
    const int rows = std::max(T, R);
    if (!use_gemv(d, rows) && !use_qgemm(d, rows)) scratch = std::max(scratch, kn::gemm_scratch_bytes(d));
  };
  for (const CudaLayer& L : layers_)
    for (const kn::DeviceLinear* d : {&L.qkv, &L.o, &L.gate_up, &L.down}) needs_copy(*d);
  SOARTUNE_STATUS_TRY(prepare_lightning());
  {
    // Sparse attention's compressed keys and workspace, before the KV pages (engine/cuda/sparse_layer.h).
    auto sp = sparse_params_for(c, opt.sparse_attention, opt.sparse_topk, opt.sparse_window, opt.max_context);
    if (!sp.ok()) return sp.status();
    const SparseLayerShape sh{S, T, opt.max_context, c.heads, c.kv_heads, c.head_dim, opt.page_size, block_stride_,
                              opt.kv_dtype, sm_count_, d_block_table_, d_q_offsets_, d_prefix_lens_, d_seq_slots_};
    SOARTUNE_STATUS_TRY(sparse_.prepare(c, sp.value(), sh, A));
  }
  needs_copy(lm_head_);
  if (scratch > 0) {
    SOARTUNE_STATUS_TRY(A(&gemm_.scratch, scratch));
    gemm_.scratch_bytes = scratch;
  }
  // The quantised-weight GEMM's workspace: the most its automatic k slices need at any row count it takes.
  auto qgemm_workspace = [&](const kn::DeviceLinear& d, int max_rows) {
    for (int rows = 1; rows <= std::min(max_rows, kn::kQgemmMaxRows); ++rows)
      if (use_qgemm(d, rows))
        qgemm_workspace_bytes_ = std::max(qgemm_workspace_bytes_,
                                          kn::qgemm_workspace_bytes(d, rows, kn::qgemm_auto_splits(d, rows, sm_count_)));
  };
  for (const CudaLayer& L : layers_)
    for (const kn::DeviceLinear* d : {&L.qkv, &L.o, &L.gate_up, &L.down}) qgemm_workspace(*d, T);
  qgemm_workspace(lm_head_, R);
  if (qgemm_workspace_bytes_ > 0)
    SOARTUNE_STATUS_TRY(A(reinterpret_cast<void**>(&qgemm_workspace_), qgemm_workspace_bytes_));

  // Every linear must be implementable at the batch sizes this plan can produce.
  for (const CudaLayer& L : layers_) {
    for (const kn::DeviceLinear* d : std::initializer_list<const kn::DeviceLinear*>{&L.qkv, &L.o, &L.gate_up, &L.down, &lm_head_}) {
      kn::GemvArgs g;
      g.w = *d;
      g.x = xn_;
      g.y = wide_;
      g.batch = std::min(kn::kGemvMaxBatch, std::max(T, R));
      const std::string e = kn::gemv_can_implement(g, opt.gemv_variant);
      if (!e.empty()) return Status::Invalid("launch.gemv_variant: " + opt.gemv_variant + " cannot run a " +
                                             std::to_string(d->n) + "x" + std::to_string(d->k) + " " +
                                             kn::weight_format_name(d->format) + " layer: " + e);
      if (!use_gemv(*d, std::max(T, R)) && !use_qgemm(*d, std::max(T, R))) {
        const std::string ge = kn::gemm_can_implement(*d, std::max(T, R), gemm_);
        if (!ge.empty()) return Status::Invalid("weights: prefill GEMM: " + ge);
      }
    }
  }

  // GEMV plans for every row count a step can give each linear (lm_head: output rows), looked up at launch.
  gemv_plans_.clear();
  for (const CudaLayer& L : layers_) {
    for (int rows = 1; rows <= T; ++rows) {
      for (auto [op, d] : {std::pair{LinearOp::kQkv, &L.qkv}, std::pair{LinearOp::kO, &L.o},
                           std::pair{LinearOp::kGateUp, &L.gate_up}, std::pair{LinearOp::kDown, &L.down}}) {
        if (!use_gemv(*d, rows)) continue;
        const GemvChoice* choice = nullptr;
        SOARTUNE_STATUS_TRY(gemv_choice(op, *d, rows, op == LinearOp::kGateUp && L.gate_up_interleaved, &choice));
      }
    }
  }
  for (int rows = 1; rows <= R && use_gemv(lm_head_, rows); ++rows) {
    const GemvChoice* choice = nullptr;
    SOARTUNE_STATUS_TRY(gemv_choice(LinearOp::kLmHead, lm_head_, rows, false, &choice));
  }

  // KV pages: enough for every sequence at max_context, within mem_fraction_pct of the device. Only softmax
  // layers keep KV; everything allocated so far (weights, step buffers, the lightning states of every slot)
  // counts as used, so the pages take what the states leave.
  size_t free_b = 0, total_b = 0;
  SOARTUNE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  kn::PagedKvLayout lay{c.kv_heads, c.head_dim, opt.page_size, opt.kv_dtype};
  const size_t page_all_layers = lay.page_bytes() * 2 * size_t(c.softmax_layers());
  const size_t budget_total = total_b / 100 * size_t(opt.mem_fraction_pct);
  const size_t used = total_b - free_b;
  const size_t budget = budget_total > used + (64u << 20) ? budget_total - used - (64u << 20) : 0;
  if (budget == 0)
    return Status::Exhausted("launch.mem_fraction_pct: " + std::to_string(opt.mem_fraction_pct) + "% of " +
                             std::to_string(total_b >> 20) + " MiB is taken by the weights, the step buffers and " +
                             std::to_string(state_bytes_ >> 20) + " MiB of lightning states (" +
                             std::to_string(S) + " slots) and " + std::to_string(sparse_attention_bytes() >> 20) +
                             " MiB of sparse attention buffers");
  // Without softmax layers a page costs nothing (the scheduler still counts positions in pages).
  const int64_t fit = page_all_layers ? int64_t(budget / page_all_layers) - 1 : int64_t(1) << 30;
  const int64_t needed = int64_t(S) * block_stride_;
  int64_t pages = opt.kv_pages > 0 ? opt.kv_pages : std::min(needed, fit);
  if (pages > fit || pages < block_stride_)
    return Status::Exhausted("launch.mem_fraction_pct: " + std::to_string(opt.mem_fraction_pct) + "% of " +
                             std::to_string(total_b >> 20) + " MiB leaves room for " + std::to_string(fit) +
                             " KV pages; " + std::to_string(pages < block_stride_ ? block_stride_ : pages) +
                             " are needed");
  num_pages_ = int(pages);
  k_cache_.assign(c.layers, nullptr);
  v_cache_.assign(c.layers, nullptr);
  for (int l = 0; l < c.layers; ++l) {
    if (c.mixer(l) != MixerKind::kSoftmax) continue;
    SOARTUNE_STATUS_TRY(A(&k_cache_[l], lay.page_bytes() * (num_pages_ + 1)));
    SOARTUNE_STATUS_TRY(A(&v_cache_[l], lay.page_bytes() * (num_pages_ + 1)));
  }
  SOARTUNE_STATUS_TRY(prepare_attention_plans());
  {
    kn::RmsNormArgs na;
    na.residual = residual_, na.gamma = final_norm_, na.out = xn_, na.rows = 1, na.d = c.hidden;
    const std::string ne = kn::rmsnorm_can_implement(na);
    if (!ne.empty()) return Status::Invalid("model: RMSNorm: " + ne);
  }

  // The whole device, not only stream_: the zeroing above (lightning states, sparse attention's compressed
  // keys, the step inputs) and the pageable weight copies ran on the legacy default stream, which a
  // non-blocking stream does not wait for; the first step must see them done.
  SOARTUNE_CUDA_TRY(cudaDeviceSynchronize());
  if (opt.cuda_graphs) {
    const int max_bs = std::min({opt.cuda_graph_max_bs, S, T, R});
    for (int b = 1; b <= max_bs; ++b) SOARTUNE_STATUS_TRY(capture_graph(b));
  }
  peak_memory_bytes();
  return Status::Ok();
}

std::size_t CudaModel::lightning_state_bytes_per_slot() const {
  const int lightning_layers = cfg_.layers - cfg_.softmax_layers();
  return size_t(lightning_layers) * size_t(cfg_.lightning_state_elems()) *
         size_t(kn::lightning_state_bytes(opt_.lightning_state_dtype));
}

// Lightning layers: one state a (layer, slot) for every one of max_sequences slots, allocated here, before
// the KV pages are sized (admission control counts both: what the states take, the pages cannot); the
// per-head log-decays -slope_h (engine/model_config.h), uploaded once; the chunked prefill's scratch.
Status CudaModel::prepare_lightning() {
  const ModelConfig& c = cfg_;
  const int T = opt_.max_step_tokens, S = opt_.max_sequences;
  state_bytes_ = 0;
  if (!c.has_lightning()) return Status::Ok();
  if (opt_.lightning_chunk < 1)
    return Status::Invalid("launch.lightning_chunk: " + std::to_string(opt_.lightning_chunk) + " is not a positive chunk");
  auto A = [&](void** p, size_t b) { return alloc(p, b); };
  state_bytes_ = lightning_state_bytes_per_slot() * size_t(S);
  SOARTUNE_STATUS_TRY(A(&state_, state_bytes_));
  SOARTUNE_CUDA_TRY(cudaMemset(state_, 0, state_bytes_));
  std::vector<float> decay;
  for (double sl : alibi_slopes(c.lightning_heads)) decay.push_back(-static_cast<float>(sl));
  SOARTUNE_STATUS_TRY(upload_floats(decay, &log_decay_, A));
  SOARTUNE_STATUS_TRY(A(reinterpret_cast<void**>(&light_out_), size_t(T) * c.lightning_q_dim() * 4));
  lightning_workspace_bytes_ =
      kn::lightning_workspace_bytes(T, S, c.lightning_heads, c.lightning_head_dim, opt_.lightning_chunk);
  if (lightning_workspace_bytes_ > 0) SOARTUNE_STATUS_TRY(A(&lightning_workspace_, lightning_workspace_bytes_));
  // The widest step each kernel can see, checked once.
  for (int l = 0; l < c.layers; ++l) {
    if (c.mixer(l) != MixerKind::kLightning) continue;
    const CudaLayer& L = layers_[size_t(l)];
    kn::LightningQkArgs qa;
    qa.qkv = wide_, qa.row_stride = L.qkv.n, qa.q_norm = L.q_norm, qa.k_norm = L.k_norm;
    qa.positions = d_positions_, qa.rope = c.lightning_use_rope, qa.rope_theta = c.rope_theta, qa.eps = c.rms_eps;
    qa.tokens = T, qa.heads = c.lightning_heads, qa.kv_heads = c.lightning_kv_heads, qa.head_dim = c.lightning_head_dim;
    SOARTUNE_KERNEL_TRY(kn::lightning_qk_can_implement(qa));
    kn::LightningArgs la = lightning_args(l, S, T);
    const std::string e = kn::lightning_can_implement(la);
    if (!e.empty())
      return Status::Invalid("launch.lightning_chunk / lightning_state_dtype: lightning attention: " + e);
    kn::OutputGateArgs ga;
    ga.attn = light_out_, ga.attn_bf16 = false;
    ga.gate = L.has_gate ? static_cast<const uint16_t*>(wide_) + (c.lightning_q_dim() + 2 * c.lightning_kv_dim()) : nullptr;
    ga.gate_stride = L.qkv.n, ga.gamma = L.o_norm, ga.out = attn_, ga.tokens = T, ga.width = c.lightning_q_dim();
    ga.eps = c.rms_eps;
    SOARTUNE_KERNEL_TRY(kn::output_gate_can_implement(ga));
  }
  return Status::Ok();
}

kn::LightningArgs CudaModel::lightning_args(int l, int batch, int max_q_len) const {
  const ModelConfig& c = cfg_;
  const CudaLayer& L = layers_[size_t(l)];
  int index = 0;  // this layer's place among the lightning layers
  for (int i = 0; i < l; ++i) index += c.mixer(i) == MixerKind::kLightning;
  const size_t per_layer = size_t(c.lightning_state_elems()) * size_t(kn::lightning_state_bytes(opt_.lightning_state_dtype)) *
                           size_t(opt_.max_sequences);
  kn::LightningArgs a;
  a.qkv = wide_;
  a.row_stride = L.qkv.n;
  a.out = light_out_;
  a.state = static_cast<uint8_t*>(state_) + size_t(index) * per_layer;
  a.state_dtype = opt_.lightning_state_dtype;
  a.slots = opt_.max_sequences;
  a.q_offsets = d_q_offsets_;
  a.start_pos = d_prefix_lens_;
  a.seq_slots = d_seq_slots_;
  a.log_decay = log_decay_;
  a.scale = c.lightning_scale;
  a.batch = batch;
  a.max_tokens = max_q_len;
  a.chunk = opt_.lightning_chunk;
  a.heads = c.lightning_heads;
  a.kv_heads = c.lightning_kv_heads;
  a.head_dim = c.lightning_head_dim;
  a.workspace = lightning_workspace_bytes_ > 0 ? lightning_workspace_ : nullptr;
  return a;
}

// The softmax layers' attention plans (none without softmax layers), on the arrays of one of them.
Status CudaModel::prepare_attention_plans() {
  const ModelConfig& c = cfg_;
  const CudaOptions& opt = opt_;
  const int T = opt.max_step_tokens, S = opt.max_sequences;
  auto A = [&](void** p, size_t b) { return alloc(p, b); };
  decode_plans_.clear();
  prefill_plans_.clear();
  if (first_softmax_ < 0) return Status::Ok();
  void* const k0 = k_cache_[size_t(first_softmax_)];
  void* const v0 = v_cache_[size_t(first_softmax_)];

  // Decode attention: a plan for each batch a decode step can have, made for max_context (a captured graph
  // replays at any context); the workspace is the widest of them.
  decode_plans_.assign(S + 1, {});
  for (int b = 1; b <= S; ++b) {
    kn::DecodeAttentionArgs da;
    da.q = q_, da.out = attn_, da.k_cache = k0, da.v_cache = v0;
    da.block_table = d_block_table_, da.seq_lens = d_seq_lens_, da.batch = b;
    da.n_heads = c.heads, da.n_kv_heads = c.kv_heads, da.head_dim = c.head_dim, da.page_size = opt.page_size;
    da.block_table_stride = block_stride_, da.max_seq_len = opt.max_context, da.kv_dtype = opt.kv_dtype;
    const std::string e = kn::decode_attention_plan(da, opt.decode_kv_splits, sm_count_, &decode_plans_[b]);
    if (!e.empty()) return Status::Invalid("launch.decode_kv_splits / kv_cache_dtype: decode attention: " + e);
    attn_workspace_bytes_ = std::max(attn_workspace_bytes_, decode_plans_[b].workspace_bytes);
  }
  if (attn_workspace_bytes_ > 0) SOARTUNE_STATUS_TRY(A(&attn_workspace_, attn_workspace_bytes_));
  {
    kn::PrefillAttentionArgs pa;
    pa.q = q_, pa.out = attn_, pa.k_cache = k0, pa.v_cache = v0;
    pa.block_table = d_block_table_, pa.q_offsets = d_q_offsets_, pa.prefix_lens = d_prefix_lens_;
    pa.batch = S, pa.n_heads = c.heads, pa.n_kv_heads = c.kv_heads, pa.head_dim = c.head_dim;
    pa.page_size = opt.page_size, pa.block_table_stride = block_stride_, pa.max_q_len = T;
    pa.kv_dtype = opt.kv_dtype;
    kn::PrefillAttentionPlan plan;
    const std::string e = kn::prefill_attention_plan(pa, opt.prefill_attn_block, &plan);
    if (!e.empty()) return Status::Invalid("launch.prefill_attn_block / kv_cache_dtype: prefill attention: " + e);
    prefill_plans_.clear();
    prefill_plans_.emplace(std::make_pair(S, T), plan);
    prefill_shape_ = pa;
  }
  {
    kn::RopeKvArgs ra;
    ra.qkv = wide_, ra.q_out = q_, ra.k_cache = k0, ra.v_cache = v0;
    ra.positions = d_positions_, ra.kv_slot = d_kv_slot_, ra.n_heads = c.heads, ra.n_kv_heads = c.kv_heads;
    ra.head_dim = c.head_dim, ra.page_size = opt.page_size, ra.kv_dtype = opt.kv_dtype;
    const std::string e = kn::rope_kv_can_implement(ra);
    if (!e.empty()) return Status::Invalid("model: RoPE: " + e);
  }
  return Status::Ok();
}

Status CudaModel::capture_graph(int batch) {
  cudaGraph_t graph = nullptr;
  SOARTUNE_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  Status s = run_layers(batch, true, batch, 1, opt_.max_context, batch);
  capturing_ = false;
  const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  if (!s.ok()) {
    if (graph) cudaGraphDestroy(graph);
    return s;
  }
  SOARTUNE_CUDA_TRY(e);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  SOARTUNE_CUDA_TRY(ie);
  graphs_[batch] = exec;
  return Status::Ok();
}

// ---- the step ----

namespace {

// Rows up to which a layer takes the GEMV rather than the GEMM, by format: measured on one llama3-8b layer's
// four linears on the H200 (docs/perf-log run 59, `soartune-bench --only linear`): for bf16 weights cuBLAS is
// level at 8 rows and 17-30% faster from 12 to 32 (0.137 against 0.198 ms at 32); int8 / int4 keep the GEMV up
// to its 32 rows (at 32: 0.18-0.21 ms against 0.32 for the expansion to bf16 plus cuBLAS; level at 48). fp16
// weights need that expansion too and keep the GEMV up to 32 (not measured at full size).
// (Run 60 measured whole-model decode with the bf16 bound at 8 and at 32: b16 -12.6%, b32 -29%, b1 and b8 level.)
constexpr int kGemvMaxRowsBf16 = 8;

int gemv_max_rows(const kn::DeviceLinear& w) {
  return w.format == kn::WeightFormat::kBf16 ? kGemvMaxRowsBf16 : kn::kGemvMaxBatch;
}

// Rows up to which int4 / int8 layers above the GEMV's rows take the quantised-weight GEMM rather than the
// expansion to bf16 + cuBLAS (kernels/qgemm.cuh reads the weights once per 64 rows; the expansion moves
// weight_bytes + 4 n k bytes a call). Measured on one layer's four linears (docs/perf-log run 90, H100,
// `soartune-bench --only linear`): at 33-64 rows it takes 0.26-0.31 ms against the expansion's 0.39-0.45
// (llama3-8b and minicpm-sala-9b shapes, int4 g128 and int8); from 96 rows, a second row tile dequantises the
// weights again and the expansion is 6-11% faster (0.396 against 0.445 ms at 96, int4 g128 llama3-8b).
constexpr int kQgemmEngineMaxRows = 64;

}  // namespace

bool CudaModel::use_gemv(const kn::DeviceLinear& w, int rows) { return rows <= gemv_max_rows(w); }

bool CudaModel::use_qgemm(const kn::DeviceLinear& w, int rows) {
  return kn::is_quantized(w.format) && !use_gemv(w, rows) && rows <= kQgemmEngineMaxRows &&
         kn::qgemm_weights_supported(w).empty();
}

namespace {

const char* linear_op_name(LinearOp op) {
  switch (op) {
    case LinearOp::kQkv: return "qkv";
    case LinearOp::kO: return "o";
    case LinearOp::kGateUp: return "gate_up";
    case LinearOp::kDown: return "down";
    case LinearOp::kLmHead: return "lm_head";
  }
  return "?";
}

// The GEMV call of each role: qkv and gate|up write bf16 (RoPE and SwiGLU read it), o and down add into the fp32
// residual stream, lm_head writes fp32 logits; qkv and gate|up may stage their RMSNorm themselves.
bool writes_bf16(LinearOp op) { return op == LinearOp::kQkv || op == LinearOp::kGateUp; }
bool accumulates(LinearOp op) { return op == LinearOp::kO || op == LinearOp::kDown; }
bool follows_norm(LinearOp op) { return op == LinearOp::kQkv || op == LinearOp::kGateUp; }

}  // namespace

Status CudaModel::gemv_choice(LinearOp op, const kn::DeviceLinear& w, int rows, bool swiglu, const GemvChoice** out) {
  const GemvKey key{op, w.format, w.group, w.n, w.k, rows, swiglu};
  auto it = gemv_plans_.find(key);
  if (it == gemv_plans_.end()) {
    kn::GemvArgs g;
    g.w = w;
    g.x = xn_;
    g.y = op == LinearOp::kLmHead ? static_cast<void*>(logits_) : accumulates(op) ? static_cast<void*>(residual_) : wide_;
    g.batch = rows;
    g.out_bf16 = writes_bf16(op);
    g.accumulate = accumulates(op);
    g.swiglu = swiglu;
    GemvChoice c;
    SOARTUNE_KERNEL_TRY(kn::gemv_plan(g, opt_.gemv_variant, &c.plan));
    // The pipelined form stages RMSNorm(residual_) itself where the normalised rows fit beside its stages.
    if (follows_norm(op) && c.plan.pipelined && rows <= kn::kGemvMaxNormBatch) {
      g.x = nullptr;
      g.norm_residual = residual_;
      g.norm_gamma = final_norm_;  // any gamma: the plan depends on shapes and shared memory
      kn::GemvPlan fused;
      if (kn::gemv_plan(g, opt_.gemv_variant, &fused).empty()) {
        c.plan = fused;
        c.norm_fused = true;
      }
    }
    it = gemv_plans_.emplace(key, c).first;
  }
  *out = &it->second;
  return Status::Ok();
}

bool CudaModel::norm_fused(LinearOp op, const kn::DeviceLinear& w, int rows, bool swiglu) {
  const GemvChoice* c = nullptr;
  return use_gemv(w, rows) && gemv_choice(op, w, rows, swiglu, &c).ok() && c->norm_fused;
}

Status CudaModel::linear(LinearOp op, const kn::DeviceLinear& w, const void* x, void* y, int rows, bool out_bf16,
                         bool accumulate, bool swiglu, const float* norm_gamma) {
  if (use_gemv(w, rows)) {
    const GemvChoice* c = nullptr;
    SOARTUNE_STATUS_TRY(gemv_choice(op, w, rows, swiglu, &c));
    if (c->norm_fused != (norm_gamma != nullptr) || out_bf16 != writes_bf16(op) || accumulate != accumulates(op))
      return Status::Internal(std::string("linear ") + linear_op_name(op) + ": the call differs from its plan");
    kn::GemvArgs g;
    g.w = w;
    g.x = norm_gamma ? nullptr : x;
    g.y = y;
    g.batch = rows;
    g.out_bf16 = out_bf16;
    g.accumulate = accumulate;
    g.swiglu = swiglu;
    if (norm_gamma) {
      g.norm_residual = residual_;
      g.norm_gamma = norm_gamma;
      g.norm_eps = stream_eps_;
    }
    SOARTUNE_CUDA_TRY(kn::gemv_run(g, c->plan, stream_));
    return Status::Ok();
  }
  if (swiglu || norm_gamma) return Status::Internal("linear: the SwiGLU and RMSNorm fusions are the GEMV's (use_gemv)");
  if (use_qgemm(w, rows)) {
    kn::QgemmArgs a;
    a.w = w;
    a.x = x;
    a.y = y;
    a.m = rows;
    a.out_bf16 = out_bf16;
    a.accumulate = accumulate;
    a.workspace = qgemm_workspace_;
    a.workspace_bytes = qgemm_workspace_bytes_;
    kn::QgemmPlan plan;
    SOARTUNE_KERNEL_TRY(kn::qgemm_plan(a, sm_count_, &plan));
    SOARTUNE_CUDA_TRY(kn::qgemm_run(a, plan, stream_));
    return Status::Ok();
  }
  SOARTUNE_KERNEL_TRY(kn::gemm_run(gemm_, w, x, w.k, y, w.n, rows, stream_, out_bf16, accumulate));
  return Status::Ok();
}

// Softmax layer: RoPE (or NoPE) + K/V into the paged cache, attention, then the output gate when the layer has
// one (attn * sigmoid(gate), the gate's rows after v in the projection) into q_, free once attention has run.
Status CudaModel::softmax_mixer(int l, int T, bool decode_only, int batch, int max_q_len, int max_seq_len,
                                const void** o_in) {
  const ModelConfig& c = cfg_;
  const CudaLayer& L = layers_[size_t(l)];
  kn::RopeKvArgs ra;
  ra.qkv = wide_;
  ra.qkv_bf16 = true;
  ra.qkv_stride = L.qkv.n;  // q | k | v (| output gate)
  ra.rotate = c.attn_use_rope;  // NoPE: MiniCPM-SALA's softmax layers
  ra.bias = L.qkv_bias;
  ra.q_out = q_;
  ra.k_cache = k_cache_[l];
  ra.v_cache = v_cache_[l];
  ra.positions = d_positions_;
  ra.kv_slot = d_kv_slot_;
  ra.tokens = T;
  ra.n_heads = c.heads;
  ra.n_kv_heads = c.kv_heads;
  ra.head_dim = c.head_dim;
  ra.page_size = opt_.page_size;
  ra.kv_dtype = opt_.kv_dtype;
  ra.rope_theta = c.rope_theta;
  SOARTUNE_CUDA_TRY(kn::rope_kv_write_run(ra, stream_));
  stage_end("rope_kv_write");
  bool attended = false;  // by sparse attention (which also keeps its compressed keys when it does not attend)
  if (sparse_.active())
    SOARTUNE_STATUS_TRY(sparse_.run(l, q_, attn_, k_cache_[l], v_cache_[l], T, decode_only, batch, max_q_len,
                                    max_seq_len, stream_, &attended));
  kn::PagedLayer paged;
  paged.q = q_;
  paged.out = attn_;
  paged.k_cache = k_cache_[l];
  paged.v_cache = v_cache_[l];
  paged.block_table = d_block_table_;
  paged.batch = batch;
  paged.n_heads = c.heads;
  paged.n_kv_heads = c.kv_heads;
  paged.head_dim = c.head_dim;
  paged.page_size = opt_.page_size;
  paged.block_table_stride = block_stride_;
  paged.kv_dtype = opt_.kv_dtype;
  if (attended) {
  } else if (decode_only) {
    auto da = kn::paged_attention_args<kn::DecodeAttentionArgs>(paged);
    da.seq_lens = d_seq_lens_;
    da.max_seq_len = max_seq_len;
    // Decode steps are planned for max_context (a captured graph replays at any context), once a batch.
    if (max_seq_len != opt_.max_context || batch < 1 || batch >= int(decode_plans_.size()))
      return Status::Internal("decode attention: no plan for batch " + std::to_string(batch) + " at context " +
                              std::to_string(max_seq_len));
    const kn::DecodeAttentionPlan& plan = decode_plans_[batch];
    if (plan.workspace_bytes > attn_workspace_bytes_)
      return Status::Internal("decode attention workspace " + std::to_string(plan.workspace_bytes) +
                              " exceeds the " + std::to_string(attn_workspace_bytes_) + " bytes planned");
    SOARTUNE_CUDA_TRY(kn::decode_attention_run(da, plan, attn_workspace_, stream_));
  } else {
    auto pa = kn::paged_attention_args<kn::PrefillAttentionArgs>(paged);
    pa.q_offsets = d_q_offsets_;
    pa.prefix_lens = d_prefix_lens_;
    pa.max_q_len = max_q_len;
    auto it = prefill_plans_.find({batch, max_q_len});
    if (it == prefill_plans_.end()) {
      kn::PrefillAttentionPlan plan;
      SOARTUNE_KERNEL_TRY(kn::prefill_attention_plan(pa, opt_.prefill_attn_block, &plan));
      it = prefill_plans_.emplace(std::make_pair(batch, max_q_len), plan).first;
    }
    SOARTUNE_CUDA_TRY(kn::prefill_attention_run(pa, it->second, stream_));
  }
  stage_end("attention");
  *o_in = attn_;
  if (!L.has_gate) return Status::Ok();
  kn::OutputGateArgs ga;
  ga.attn = attn_;
  ga.attn_bf16 = true;
  ga.gate = static_cast<const uint16_t*>(wide_) + (c.q_dim() + 2 * c.kv_dim());
  ga.gate_stride = L.qkv.n;
  ga.gamma = nullptr;
  ga.out = q_;
  ga.tokens = T;
  ga.width = c.q_dim();
  ga.eps = c.rms_eps;
  SOARTUNE_CUDA_TRY(kn::output_gate_run(ga, stream_));
  stage_end("output_gate");
  *o_in = q_;
  return Status::Ok();
}

// Lightning layer: q/k RMSNorm + RoPE in place, Simple GLA over each sequence's state slot (reset at its first
// token; the recurrence for decode steps, the chunked form for longer ones), then the output RMSNorm over all
// heads times sigmoid(z) into attn_.
Status CudaModel::lightning_mixer(int l, int T, int batch, int max_q_len, const void** o_in) {
  const ModelConfig& c = cfg_;
  const CudaLayer& L = layers_[size_t(l)];
  kn::LightningQkArgs qa;
  qa.qkv = wide_;
  qa.row_stride = L.qkv.n;
  qa.q_norm = L.q_norm;
  qa.k_norm = L.k_norm;
  qa.positions = d_positions_;
  qa.rope = c.lightning_use_rope;
  qa.rope_theta = c.rope_theta;
  qa.eps = c.rms_eps;
  qa.tokens = T;
  qa.heads = c.lightning_heads;
  qa.kv_heads = c.lightning_kv_heads;
  qa.head_dim = c.lightning_head_dim;
  SOARTUNE_CUDA_TRY(kn::lightning_qk_run(qa, stream_));
  stage_end("lightning_qk");
  SOARTUNE_CUDA_TRY(kn::lightning_run(lightning_args(l, batch, max_q_len), stream_));
  stage_end("lightning");
  kn::OutputGateArgs ga;
  ga.attn = light_out_;
  ga.attn_bf16 = false;
  ga.gate = L.has_gate ? static_cast<const uint16_t*>(wide_) + (c.lightning_q_dim() + 2 * c.lightning_kv_dim()) : nullptr;
  ga.gate_stride = L.qkv.n;
  ga.gamma = L.o_norm;
  ga.out = attn_;
  ga.tokens = T;
  ga.width = c.lightning_q_dim();
  ga.eps = c.rms_eps;
  SOARTUNE_CUDA_TRY(kn::output_gate_run(ga, stream_));
  stage_end("output_gate");
  *o_in = attn_;
  return Status::Ok();
}

Status CudaModel::run_layers(int T, bool decode_only, int batch, int max_q_len, int max_seq_len, int rows_out) {
  const ModelConfig& c = cfg_;
  stage_end("start");
  SOARTUNE_CUDA_TRY(kn::embedding_gather_run(d_tokens_, embed_, residual_, T, c.hidden, stream_,
                                             c.embed_scale / stream_scale_));
  stage_end("embed");
  // A step asked for its residual stream (StepOutput::residual_stream; eager steps only): a copy after the
  // embedding and after every layer, scaled back to h by forward() once the step is done.
  const size_t stream_floats = size_t(T) * c.hidden;
  if (capture_)
    SOARTUNE_CUDA_TRY(cudaMemcpyAsync(capture_, residual_, stream_floats * 4, cudaMemcpyDeviceToHost, stream_));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const CudaLayer& L = layers_[l];
    kn::RmsNormArgs na;
    na.residual = residual_;
    na.add = nullptr;  // the o and down projections add themselves into the residual
    na.gamma = L.attn_norm;
    na.out = xn_;
    na.rows = T;
    na.d = c.hidden;
    na.eps = stream_eps_;  // the residual stream holds h / stream_scale_ (prepare())
    // A pipelined GEMV stages the normalised rows itself (no RMSNorm kernel, no round trip through xn_).
    const bool fuse_attn_norm = norm_fused(LinearOp::kQkv, L.qkv, T, false);
    if (!fuse_attn_norm) {
      SOARTUNE_CUDA_TRY(kn::rmsnorm_residual_run(na, stream_));
      stage_end("rmsnorm");
    }
    // q|k|v in bf16, as a 16-bit reference model rounds them: RoPE reads half the bytes.
    SOARTUNE_STATUS_TRY(linear(LinearOp::kQkv, L.qkv, xn_, wide_, T, /*out_bf16=*/true, false, false,
                               fuse_attn_norm ? L.attn_norm : nullptr));
    stage_end("linear_qkv");
    const void* o_in = nullptr;
    if (L.kind == MixerKind::kLightning) SOARTUNE_STATUS_TRY(lightning_mixer(int(l), T, batch, max_q_len, &o_in));
    else SOARTUNE_STATUS_TRY(softmax_mixer(int(l), T, decode_only, batch, max_q_len, max_seq_len, &o_in));
    SOARTUNE_STATUS_TRY(linear(LinearOp::kO, L.o, o_in, residual_, T, false, /*accumulate=*/true));
    stage_end("linear_o");
    na.gamma = L.mlp_norm;
    const bool gate_up_swiglu = L.gate_up_interleaved && use_gemv(L.gate_up, T);
    const bool fuse_mlp_norm = norm_fused(LinearOp::kGateUp, L.gate_up, T, gate_up_swiglu);
    if (!fuse_mlp_norm) {
      SOARTUNE_CUDA_TRY(kn::rmsnorm_residual_run(na, stream_));
      stage_end("rmsnorm");
    }
    const float* mlp_gamma = fuse_mlp_norm ? L.mlp_norm : nullptr;
    // gate|up in bf16, as a 16-bit reference model rounds it: SwiGLU reads half the bytes. Decode steps
    // (GEMV rows) with the interleaved layout apply SwiGLU in the GEMV's epilogue: no kernel, no round trip.
    const void* down_x = xn_;
    if (gate_up_swiglu) {
      SOARTUNE_STATUS_TRY(linear(LinearOp::kGateUp, L.gate_up, xn_, wide_, T, /*out_bf16=*/true, false, /*swiglu=*/true, mlp_gamma));
      stage_end("linear_gate_up");
      down_x = wide_;
    } else {
      SOARTUNE_STATUS_TRY(linear(LinearOp::kGateUp, L.gate_up, xn_, wide_, T, /*out_bf16=*/true, false, false, mlp_gamma));
      stage_end("linear_gate_up");
      SOARTUNE_CUDA_TRY(kn::swiglu_run(wide_, xn_, T, c.intermediate, stream_, /*gate_up_bf16=*/true,
                                       L.gate_up_interleaved));
      stage_end("swiglu");
    }
    SOARTUNE_STATUS_TRY(linear(LinearOp::kDown, L.down, down_x, residual_, T, false, /*accumulate=*/true));
    stage_end("linear_down");
    if (capture_)
      SOARTUNE_CUDA_TRY(cudaMemcpyAsync(capture_ + (l + 1) * stream_floats, residual_, stream_floats * 4,
                                        cudaMemcpyDeviceToHost, stream_));
  }
  if (rows_out == 0) return Status::Ok();  // a prefill chunk that only fills the KV cache
  kn::RmsNormArgs fa;
  fa.residual = residual_;
  fa.add = nullptr;
  fa.row_index = d_out_rows_;
  fa.gamma = final_gamma_;  // final_norm / logit_divisor
  fa.out = xn_;
  fa.rows = rows_out;
  fa.d = c.hidden;
  fa.eps = stream_eps_;
  SOARTUNE_CUDA_TRY(kn::rmsnorm_residual_run(fa, stream_));
  stage_end("rmsnorm");
  SOARTUNE_STATUS_TRY(linear(LinearOp::kLmHead, lm_head_, xn_, logits_, rows_out));
  stage_end("lm_head");
  SOARTUNE_CUDA_TRY(kn::argmax_run(logits_, rows_out, c.vocab, d_argmax_, stream_));
  stage_end("argmax");
  return Status::Ok();
}

Status CudaModel::copy_inputs(const Step& step, bool decode_only, int* max_q_len, int* max_seq_len) {
  const int T = int(step.tokens.size()), S = int(step.seqs.size()), R = int(step.output_rows.size());
  const int64_t off_tokens = d_tokens_ - d_inputs_, off_pos = d_positions_ - d_inputs_,
                off_slot = d_kv_slot_ - d_inputs_, off_len = d_seq_lens_ - d_inputs_,
                off_prefix = d_prefix_lens_ - d_inputs_, off_qoff = d_q_offsets_ - d_inputs_,
                off_seq_slot = d_seq_slots_ - d_inputs_,
                off_rows = d_out_rows_ - d_inputs_, off_bt = d_block_table_ - d_inputs_;
  int32_t* h = h_inputs_;
  *max_q_len = 0;
  *max_seq_len = 0;
  for (int s = 0; s < S; ++s) {
    const StepSequence& q = step.seqs[s];
    const int end = q.start_pos + q.num_tokens;
    const int pages = (end + opt_.page_size - 1) / opt_.page_size;
    if (q.num_tokens < 1 || q.first_token < 0 || q.first_token + q.num_tokens > T)
      return Status::Invalid("step.seqs[" + std::to_string(s) + "]: tokens out of range");
    // The slot indexes the lightning states (a slot's state is read only by the sequence occupying it).
    if (q.slot < 0 || q.slot >= opt_.max_sequences)
      return Status::Invalid("step.seqs[" + std::to_string(s) + "].slot: " + std::to_string(q.slot) + " is not in 0.." +
                             std::to_string(opt_.max_sequences - 1));
    if (end > opt_.max_context)
      return Status::Invalid("step.seqs[" + std::to_string(s) + "]: context " + std::to_string(end) +
                             " exceeds the planned max_context " + std::to_string(opt_.max_context));
    if (int(q.block_table.size()) < pages)
      return Status::Invalid("step.seqs[" + std::to_string(s) + "].block_table: covers fewer than " +
                             std::to_string(pages) + " pages");
    for (int pg = 0; pg < pages; ++pg) {
      const int32_t id = q.block_table[pg];
      if (id < 0 || id >= num_pages_)
        return Status::Invalid("step.seqs[" + std::to_string(s) + "].block_table: page " + std::to_string(id) +
                               " is not in 0.." + std::to_string(num_pages_ - 1));
      h[off_bt + int64_t(s) * block_stride_ + pg] = id;
    }
    h[off_len + s] = end;
    h[off_prefix + s] = q.start_pos;
    h[off_seq_slot + s] = q.slot;
    h[off_qoff + s] = q.first_token;
    for (int j = 0; j < q.num_tokens; ++j) {
      const int i = q.first_token + j, pos = q.start_pos + j;
      h[off_tokens + i] = step.tokens[i];
      h[off_pos + i] = pos;
      h[off_slot + i] = q.block_table[pos / opt_.page_size] * opt_.page_size + pos % opt_.page_size;
    }
    *max_q_len = std::max(*max_q_len, q.num_tokens);
    *max_seq_len = std::max(*max_seq_len, end);
  }
  h[off_qoff + S] = T;
  for (int r = 0; r < R; ++r) {
    if (step.output_rows[r] < 0 || step.output_rows[r] >= T)
      return Status::Invalid("step.output_rows[" + std::to_string(r) + "]: not a token index");
    h[off_rows + r] = step.output_rows[r];
  }
  for (int i = 0; i < T; ++i)
    if (step.tokens[i] < 0 || step.tokens[i] >= cfg_.vocab)
      return Status::Invalid("step.tokens[" + std::to_string(i) + "]: " + std::to_string(step.tokens[i]) +
                             " is not in 0.." + std::to_string(cfg_.vocab - 1));
  (void)decode_only;
  const size_t words = size_t(off_bt) + size_t(S) * block_stride_;
  SOARTUNE_CUDA_TRY(cudaMemcpyAsync(d_inputs_, h_inputs_, words * 4, cudaMemcpyHostToDevice, stream_));
  return Status::Ok();
}

Status CudaModel::forward(const Step& step, StepOutput& out) {
  const int T = int(step.tokens.size()), S = int(step.seqs.size()), R = int(step.output_rows.size());
  if (T < 1 || T > opt_.max_step_tokens)
    return Status::Invalid("step.tokens: " + std::to_string(T) + " tokens; the plan allows 1.." +
                           std::to_string(opt_.max_step_tokens));
  if (S < 1 || S > opt_.max_sequences)
    return Status::Invalid("step.seqs: " + std::to_string(S) + " sequences; the plan allows 1.." +
                           std::to_string(opt_.max_sequences));
  if (R > opt_.max_output_rows)
    return Status::Invalid("step.output_rows: " + std::to_string(R) + " rows; the plan allows " +
                           std::to_string(opt_.max_output_rows));
  if (int(step.positions.size()) != T) return Status::Invalid("step.positions: must have one entry per token");
  if (int(out.argmax.size()) < R) return Status::Invalid("out.argmax: fewer entries than output rows");
  if (!out.logits.empty() && out.logits.size() < size_t(R) * cfg_.vocab)
    return Status::Invalid("out.logits: fewer than rows * vocab entries");
  const size_t stream_floats = size_t(T) * cfg_.hidden;
  const bool capture = !out.residual_stream.empty();
  if (capture && out.residual_stream.size() < size_t(cfg_.layers + 1) * stream_floats)
    return Status::Invalid("out.residual_stream: fewer than (layers + 1) * tokens * hidden entries");
  const bool decode_only = S == T;
  int max_q_len = 0, max_seq_len = 0;
  SOARTUNE_STATUS_TRY(copy_inputs(step, decode_only, &max_q_len, &max_seq_len));
  auto it = decode_only && R == T ? graphs_.find(T) : graphs_.end();
  bool rows_identity = true;
  for (int r = 0; r < R; ++r) rows_identity = rows_identity && step.output_rows[r] == r;
  if (it != graphs_.end() && rows_identity && !observer_ && !capture) {
    SOARTUNE_CUDA_TRY(cudaGraphLaunch(it->second, stream_));
  } else {
    capture_ = capture ? out.residual_stream.data() : nullptr;
    const Status s = run_layers(T, decode_only, S, max_q_len, decode_only ? opt_.max_context : max_seq_len, R);
    capture_ = nullptr;
    SOARTUNE_STATUS_TRY(s);
  }
  if (R > 0) SOARTUNE_CUDA_TRY(cudaMemcpyAsync(h_argmax_, d_argmax_, size_t(R) * 4, cudaMemcpyDeviceToHost, stream_));
  if (R > 0 && !out.logits.empty())
    SOARTUNE_CUDA_TRY(cudaMemcpyAsync(out.logits.data(), logits_, size_t(R) * cfg_.vocab * 4,
                                      cudaMemcpyDeviceToHost, stream_));
  SOARTUNE_CUDA_TRY(cudaStreamSynchronize(stream_));
  std::copy(h_argmax_, h_argmax_ + R, out.argmax.begin());
  if (capture)
    for (size_t i = 0; i < size_t(cfg_.layers + 1) * stream_floats; ++i) out.residual_stream[i] *= stream_scale_;
  return Status::Ok();
}

Status CudaModel::launch_decode_graph(int batch) {
  auto it = graphs_.find(batch);
  if (it == graphs_.end())
    return Status::Invalid("batch: " + std::to_string(batch) + " has no captured decode graph");
  SOARTUNE_CUDA_TRY(cudaGraphLaunch(it->second, stream_));
  return Status::Ok();
}

std::size_t CudaModel::kv_cache_bytes() const {
  const kn::PagedKvLayout lay{cfg_.kv_heads, cfg_.head_dim, opt_.page_size, opt_.kv_dtype};
  return lay.page_bytes() * (num_pages_ + 1);
}

std::size_t CudaModel::peak_memory_bytes() const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) peak_used_ = std::max(peak_used_, total_b - free_b);
  return peak_used_;
}

namespace {

std::string rows_text(int first, int last) {
  return first == last ? std::to_string(first) : std::to_string(first) + ".." + std::to_string(last);
}

std::string linear_shape(const kn::DeviceLinear& w) {
  std::string s = std::to_string(w.n) + "x" + std::to_string(w.k) + " " + kn::weight_format_name(w.format);
  if (kn::is_quantized(w.format)) s += w.group == w.k ? " per-channel" : " g" + std::to_string(w.group);
  return s;
}

// Appends `plan` for rows `rows`, or widens the previous entry when it is the same op, shape and choice at the
// row count before (so the report lists ranges of rows, not one entry a row).
void add_ranged(std::vector<KernelPlan>* out, std::vector<std::pair<int, int>>* ranges, const std::string& op,
                const std::string& shape, int rows, std::map<std::string, std::string> choice) {
  if (!out->empty() && out->back().op == op && ranges->back().second == rows - 1 && out->back().choice == choice &&
      out->back().shape.starts_with(shape + " rows ")) {
    ranges->back().second = rows;
    out->back().shape = shape + " rows " + rows_text(ranges->back().first, rows);
    return;
  }
  out->push_back({op, shape + " rows " + std::to_string(rows), std::move(choice)});
  ranges->push_back({rows, rows});
}

}  // namespace

std::vector<KernelPlan> CudaModel::kernel_plans() const {
  std::vector<KernelPlan> out;
  std::vector<std::pair<int, int>> ranges;  // beside out: the rows each entry covers
  auto add = [&](const std::string& op, const std::string& shape, int rows, std::map<std::string, std::string> c) {
    add_ranged(&out, &ranges, op, shape, rows, std::move(c));
  };
  // Linears: the quantised-weight GEMM's rows with its slices, the GEMV's plan a row count (gemv_plans_ is ordered
  // by op, format, group, shape, rows), the rows cuBLAS takes.
  std::map<std::pair<LinearOp, std::string>, const kn::DeviceLinear*> linears;  // one a role and shape
  for (const CudaLayer& L : layers_)
    for (auto [op, d] : {std::pair{LinearOp::kQkv, &L.qkv}, std::pair{LinearOp::kO, &L.o},
                         std::pair{LinearOp::kGateUp, &L.gate_up}, std::pair{LinearOp::kDown, &L.down}})
      linears.emplace(std::pair{op, linear_shape(*d)}, d);
  if (have_weights_) linears.emplace(std::pair{LinearOp::kLmHead, linear_shape(lm_head_)}, &lm_head_);
  for (const auto& [role, d] : linears) {
    const LinearOp op = role.first;
    const int max_rows = op == LinearOp::kLmHead ? opt_.max_output_rows : opt_.max_step_tokens;
    for (int rows = 1; rows <= max_rows; ++rows) {
      if (use_qgemm(*d, rows)) {
        add(std::string("qgemm.") + linear_op_name(op), role.second, rows,
            {{"kernel", "qgemm"}, {"splits", std::to_string(kn::qgemm_auto_splits(*d, rows, sm_count_))}});
        continue;
      }
      if (!use_gemv(*d, rows)) {
        add(std::string("gemm.") + linear_op_name(op), role.second, rows,
            {{"kernel", "cublas"}, {"bf16_copy", d->format == kn::WeightFormat::kBf16 ? "no" : "yes"}});
        continue;
      }
      for (const auto& [key, c] : gemv_plans_) {
        if (key.op != op || key.format != d->format || key.group != d->group || key.n != d->n || key.k != d->k ||
            key.rows != rows)
          continue;
        std::map<std::string, std::string> choice = {
            {"variant", kn::gemv_variant_names()[c.plan.variant]},
            {"grid", std::to_string(c.plan.grid)},
            {"threads", std::to_string(c.plan.threads)},
            {"batch_tiles", std::to_string(c.plan.n_tiles)},
        };
        std::string fused = c.norm_fused ? "rmsnorm" : "";
        if (key.swiglu) fused += fused.empty() ? "swiglu" : "+swiglu";
        if (!fused.empty()) choice["fused"] = fused;
        add(std::string("gemv.") + linear_op_name(op), role.second, rows, std::move(choice));
      }
    }
  }
  if (cfg_.has_lightning() && state_) {
    out.push_back({"lightning",
                   "heads " + std::to_string(cfg_.lightning_heads) + "/" + std::to_string(cfg_.lightning_kv_heads) +
                       " head_dim " + std::to_string(cfg_.lightning_head_dim) + " slots " +
                       std::to_string(opt_.max_sequences),
                   {{"state_dtype", opt_.lightning_state_dtype == kn::LightningStateDtype::kBf16 ? "bf16" : "fp32"},
                    {"chunk", std::to_string(opt_.lightning_chunk)},
                    {"state_bytes", std::to_string(state_bytes_)}}});
  }
  const std::string attn_shape = "heads " + std::to_string(cfg_.heads) + "/" + std::to_string(cfg_.kv_heads) +
                                 " head_dim " + std::to_string(cfg_.head_dim) + " kv " +
                                 kn::kv_dtype_name(opt_.kv_dtype) + " page " + std::to_string(opt_.page_size);
  for (int b = 1; b < int(decode_plans_.size()); ++b) {
    const kn::DecodeAttentionPlan& p = decode_plans_[b];
    add("attention.decode", attn_shape + " context " + std::to_string(opt_.max_context) + " batch", b,
        {{"kv_splits", std::to_string(p.kv_splits)},
         {"heads_per_cta", std::to_string(p.heads_per_cta)},
         {"tensor_cores", p.tensor_cores ? "yes" : "no"},
         {"threads", std::to_string(p.threads)}});
  }
  for (KernelPlan& p : sparse_.kernel_plans()) out.push_back(std::move(p));
  // Prefill attention: the tiles are fixed by the knob and the shapes; the grid follows each step's query rows.
  auto it = prefill_plans_.find({prefill_shape_.batch, prefill_shape_.max_q_len});
  if (it != prefill_plans_.end()) {
    const kn::PrefillAttentionPlan& p = it->second;
    out.push_back({"attention.prefill",
                   attn_shape + " batch <= " + std::to_string(prefill_shape_.batch) + " q_len <= " +
                       std::to_string(prefill_shape_.max_q_len),
                   {{"block_m", std::to_string(p.block_m)},
                    {"block_n", std::to_string(p.block_n)},
                    {"tensor_cores", p.tensor_cores ? "yes" : "no"},
                    {"threads", std::to_string(p.threads)},
                    {"smem_bytes", std::to_string(p.smem_bytes)}}});
  }
  return out;
}

}  // namespace soartune::engine::cuda
