// The engine's Backend on a CUDA device: a thin adapter from BackendPlan / Step to CudaModel.
#include <chrono>
#include <memory>

#include <spdlog/spdlog.h>

#include "core/knob_catalogue.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_model.h"

namespace soartune::engine {
namespace {

kernels::KvCacheDtype to_kernel_dtype(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kBF16: return kernels::KvCacheDtype::kBf16;
    case KvCacheDtype::kFP16: return kernels::KvCacheDtype::kFp16;
    case KvCacheDtype::kFP8E4M3: return kernels::KvCacheDtype::kFp8E4M3;
    case KvCacheDtype::kFP8E5M2: return kernels::KvCacheDtype::kFp8E5M2;
    default: return kernels::KvCacheDtype::kBf16;
  }
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::unique_ptr<cuda::CudaModel> m) : model_(std::move(m)) {}
  std::string name() const override { return "cuda"; }
  std::string device() const override { return model_->device_name(); }

  Status prepare(const BackendPlan& plan) override {
    if (!plan.weights) return Status::Invalid("plan.weights: no model weights given");
    const KvCacheDtype kv = plan.launch.kv_cache_dtype;
    if (kv != KvCacheDtype::kBF16 && kv != KvCacheDtype::kFP16 && kv != KvCacheDtype::kFP8E4M3 && kv != KvCacheDtype::kFP8E5M2)
      return core::disallowed(*core::find_knob("kv_cache_dtype"), kv_cache_dtype_name(kv), "launch.kv_cache_dtype");
    const auto t0 = std::chrono::steady_clock::now();
    Status s = model_->upload(*plan.weights);
    if (!s.ok()) return s;
    const auto t1 = std::chrono::steady_clock::now();
    cuda::CudaOptions o;
    o.kv_dtype = to_kernel_dtype(plan.launch.kv_cache_dtype);
    o.page_size = plan.launch.kv_page_size;
    o.kv_pages = plan.kv_pages;
    o.mem_fraction_pct = plan.launch.mem_fraction_pct;
    o.max_sequences = plan.max_sequences;
    o.max_step_tokens = plan.max_step_tokens;
    o.max_output_rows = plan.max_output_rows;
    o.max_context = plan.max_context;
    o.gemv_variant = plan.launch.gemv_variant;
    o.decode_kv_splits = plan.launch.decode_kv_splits;
    o.prefill_attn_block = plan.launch.prefill_attn_block;
    o.cuda_graphs = plan.launch.cuda_graphs;
    o.cuda_graph_max_bs = plan.launch.cuda_graph_max_bs;
    o.lightning_state_dtype = plan.launch.lightning_state_dtype == StateDtype::kBF16
                                  ? kernels::LightningStateDtype::kBf16
                                  : kernels::LightningStateDtype::kFp32;
    o.lightning_chunk = plan.launch.lightning_chunk;
    o.sparse_attention = plan.launch.sparse_attention;
    o.sparse_topk = plan.launch.sparse_topk;
    o.sparse_window = plan.launch.sparse_window;
    s = model_->prepare(o);
    const auto t2 = std::chrono::steady_clock::now();
    spdlog::info("cuda: weights uploaded in {:.2f} s ({:.2f} GB), buffers, plans and graphs in {:.2f} s",
                 std::chrono::duration<double>(t1 - t0).count(), double(model_->weight_bytes()) / 1e9,
                 std::chrono::duration<double>(t2 - t1).count());
    return s;
  }
  int kv_pages() const override { return model_->kv_pages(); }
  Status forward(const Step& step, StepOutput& out) override { return model_->forward(step, out); }
  std::size_t peak_memory_bytes() const override { return model_->peak_memory_bytes(); }
  std::vector<KernelPlan> kernel_plans() const override { return model_->kernel_plans(); }

 private:
  std::unique_ptr<cuda::CudaModel> model_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index) {
  auto m = std::make_unique<cuda::CudaModel>();
  Status s = m->init(device_index);
  if (!s.ok()) return s;
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(std::move(m)));
}

}  // namespace soartune::engine
