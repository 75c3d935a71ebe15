#include "engine/bench/step_timing.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "kernels/attention_paged.h"
#include "kernels/cuda_check.cuh"
#include "kernels/synthetic.cuh"

namespace soartune::engine::bench {

namespace kn = soartune::kernels;

namespace {

#define BENCH_CUDA_TRY(stmt)                                                                       \
  do {                                                                                             \
    cudaError_t bench_e_ = (stmt);                                                                 \
    if (bench_e_ != cudaSuccess)                                                                   \
      return Status::Internal(kn::cuda_error_message(bench_e_, #stmt, __FILE__, __LINE__));      \
  } while (0)

// Records an event after each stage (a step has at most `capacity` stages; later ones are not timed).
class StageEvents final : public cuda::StepObserver {
 public:
  ~StageEvents() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  Status init(size_t capacity) {
    for (size_t i = 0; i < capacity; ++i) {
      cudaEvent_t e;
      BENCH_CUDA_TRY(cudaEventCreate(&e));
      events_.push_back(e);
    }
    names_.resize(capacity);
    return Status::Ok();
  }
  void stage_end(const char* stage, cudaStream_t stream) override {
    if (n_ >= events_.size()) return;
    cudaEventRecord(events_[n_], stream);
    names_[n_++] = stage;
  }
  // Device time from each recorded stage's end to the next's, summed by name.
  Status stages(std::vector<std::pair<std::string, double>>* out) const {
    out->clear();
    for (size_t i = 1; i < n_; ++i) {
      float ms = 0;
      BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
      auto it = std::find_if(out->begin(), out->end(), [&](const auto& p) { return p.first == names_[i]; });
      if (it == out->end()) out->push_back({names_[i], ms});
      else it->second += ms;
    }
    return Status::Ok();
  }

 private:
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> names_;
  size_t n_ = 0;
};

}  // namespace

Status profile_step(cuda::CudaModel& model, const Step& step, std::vector<std::pair<std::string, double>>* stages) {
  StageEvents events;
  // A layer has at most 10 stages (a gated softmax layer: rmsnorm, qkv, rope_kv_write, attention, output_gate,
  // o, rmsnorm, gate_up, swiglu, down).
  Status s = events.init(size_t(model.config().layers) * 12 + 16);
  if (!s.ok()) return s;
  std::vector<int32_t> argmax(step.output_rows.size());
  StepOutput out;
  out.argmax = argmax;
  model.set_step_observer(&events);
  s = model.forward(step, out);
  model.set_step_observer(nullptr);
  if (!s.ok()) return s;
  return events.stages(stages);
}

Status replay_graph(cuda::CudaModel& model, int batch, int reps, double* ms_per_step) {
  if (reps < 1) return Status::Invalid("reps: must be >= 1");
  Status s = model.launch_decode_graph(batch);  // warm
  if (!s.ok()) return s;
  cudaEvent_t a, b;
  BENCH_CUDA_TRY(cudaEventCreate(&a));
  BENCH_CUDA_TRY(cudaEventCreate(&b));
  cudaError_t e = cudaEventRecord(a, model.stream());
  for (int i = 0; i < reps && e == cudaSuccess && s.ok(); ++i) s = model.launch_decode_graph(batch);
  if (e == cudaSuccess) e = cudaEventRecord(b, model.stream());
  if (e == cudaSuccess) e = cudaEventSynchronize(b);
  float ms = 0;
  if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (!s.ok()) return s;
  BENCH_CUDA_TRY(e);
  *ms_per_step = double(ms) / reps;
  return Status::Ok();
}

Status fill_kv_random(cuda::CudaModel& model, uint64_t seed) {
  const kn::KvCacheDtype dtype = model.options().kv_dtype;
  const size_t bytes = model.kv_cache_bytes();
  for (int l = 0; l < model.config().layers; ++l) {
    for (void* c : {model.k_cache(l), model.v_cache(l)}) {
      ++seed;
      if (!c) continue;  // a lightning layer keeps no KV
      if (kn::kv_dtype_bytes(dtype) == 2) {
        // bf16 bits of values in [-1, 1]; read as fp16 they are small finite numbers too.
        BENCH_CUDA_TRY(kn::fill_uniform_bf16(c, int64_t(bytes / 2), seed, 1.f, model.stream()));
      } else {
        BENCH_CUDA_TRY(kn::fill_random_fp8(c, int64_t(bytes), seed, model.stream()));
      }
    }
  }
  BENCH_CUDA_TRY(cudaStreamSynchronize(model.stream()));
  return Status::Ok();
}

}  // namespace soartune::engine::bench
