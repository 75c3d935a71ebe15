#include "engine/bench/synthetic_weights.h"

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda_check.cuh"
#include "kernels/synthetic.cuh"

namespace soartune::engine::bench {

namespace kn = soartune::kernels;

namespace {

// The device allocations of one DeviceWeights, freed unless they are handed to the model.
struct Allocations {
  cuda::DeviceWeights w;
  ~Allocations() {
    for (void* p : w.allocations) cudaFree(p);
  }
  Status alloc(void** p, size_t bytes) {
    bytes = (bytes + 255) / 256 * 256;
    const cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return Status::Exhausted(kn::cuda_error_message(e, "cudaMalloc", __FILE__, __LINE__));
    }
    w.allocations.push_back(*p);
    w.allocated_bytes += bytes;
    return Status::Ok();
  }
};

#define BENCH_TRY(expr)                      \
  do {                                       \
    Status bench_s_ = (expr);                \
    if (!bench_s_.ok()) return bench_s_;     \
  } while (0)
#define BENCH_CUDA_TRY(stmt)                                                                       \
  do {                                                                                             \
    cudaError_t bench_e_ = (stmt);                                                                 \
    if (bench_e_ != cudaSuccess)                                                                   \
      return Status::Internal(kn::cuda_error_message(bench_e_, #stmt, __FILE__, __LINE__));      \
  } while (0)

}  // namespace

Status generate_weights(cuda::CudaModel& model, const ModelConfig& c, const SyntheticSpec& spec) {
  Allocations a;
  cudaStream_t stream = model.stream();
  uint64_t seed = spec.seed * 1000003ull;
  const float kStd = 0.02f;
  auto make_linear = [&](int n, int k, kn::WeightFormat f, int group, kn::DeviceLinear* out) -> Status {
    kn::DeviceLinear d;
    d.format = f;
    d.n = n;
    d.k = k;
    d.group = kn::is_quantized(f) ? (group == 0 ? k : group) : 0;
    void* w = nullptr;
    BENCH_TRY(a.alloc(&w, kn::weight_bytes(f, n, k)));
    if (f == kn::WeightFormat::kBf16 || f == kn::WeightFormat::kFp16) {
      // fp16 bits of small uniform values are generated as bf16 then reinterpreted: still finite and small.
      BENCH_CUDA_TRY(kn::fill_uniform_bf16(w, int64_t(n) * k, ++seed, kStd, stream));
    } else {
      const int bits = f == kn::WeightFormat::kInt8 ? 8 : 4;
      BENCH_CUDA_TRY(kn::fill_random_codes(w, int64_t(n) * k, ++seed, bits, stream));
      const int64_t ns = int64_t(n) * (k / d.group);
      void* s = nullptr;
      BENCH_TRY(a.alloc(&s, ns * 4));
      const float qmax = bits == 8 ? 127.f : 7.f;
      BENCH_CUDA_TRY(kn::fill_uniform_f32(static_cast<float*>(s), ns, ++seed, 0.5f * kStd / qmax,
                                          1.5f * kStd / qmax, stream));
      d.scales = static_cast<float*>(s);
      a.w.weight_bytes += ns * 4;
    }
    d.w = w;
    a.w.weight_bytes += kn::weight_bytes(f, n, k);
    *out = d;
    return Status::Ok();
  };
  auto make_norm = [&](float** out, int width = 0) -> Status {
    width = width > 0 ? width : c.hidden;
    void* p = nullptr;
    BENCH_TRY(a.alloc(&p, size_t(width) * 4));
    BENCH_CUDA_TRY(kn::fill_uniform_f32(static_cast<float*>(p), width, ++seed, 0.9f, 1.1f, stream));
    *out = static_cast<float*>(p);
    return Status::Ok();
  };
  BENCH_TRY(a.alloc(&a.w.embed, size_t(c.vocab) * c.hidden * 2));
  BENCH_CUDA_TRY(kn::fill_uniform_bf16(a.w.embed, int64_t(c.vocab) * c.hidden, ++seed, 1.0f, stream));
  a.w.layers.assign(c.layers, {});
  for (int l = 0; l < c.layers; ++l) {
    cuda::CudaLayer& D = a.w.layers[size_t(l)];
    // A MiniCPM-SALA layer as CudaModel::upload lays it out: the output gate's rows after v, the lightning
    // layers' norms.
    D.kind = c.mixer(l);
    const bool lightning = D.kind == MixerKind::kLightning;
    const int qd = c.layer_q_dim(l), kvd = c.layer_kv_dim(l);
    D.has_gate = lightning ? c.lightning_output_gate : c.attn_output_gate;
    BENCH_TRY(make_linear(qd + 2 * kvd + (D.has_gate ? qd : 0), c.hidden, spec.format, spec.group, &D.qkv));
    BENCH_TRY(make_linear(c.hidden, qd, spec.format, spec.group, &D.o));
    if (lightning && c.lightning_qk_norm) {
      BENCH_TRY(make_norm(&D.q_norm, c.lightning_head_dim));
      BENCH_TRY(make_norm(&D.k_norm, c.lightning_head_dim));
    }
    if (lightning && c.lightning_output_norm) BENCH_TRY(make_norm(&D.o_norm, qd));
    BENCH_TRY(make_linear(2 * c.intermediate, c.hidden, spec.format, spec.group, &D.gate_up));
    D.gate_up_interleaved = c.intermediate % 8 == 0;  // random rows: any order is the interleaved one
    BENCH_TRY(make_linear(c.hidden, c.intermediate, spec.format, spec.group, &D.down));
    BENCH_TRY(make_norm(&D.attn_norm));
    BENCH_TRY(make_norm(&D.mlp_norm));
  }
  BENCH_TRY(make_norm(&a.w.final_norm));
  BENCH_TRY(make_linear(c.vocab, c.hidden, spec.lm_head_format, spec.group, &a.w.lm_head));
  BENCH_CUDA_TRY(cudaStreamSynchronize(stream));
  cuda::DeviceWeights w = std::move(a.w);
  a.w = {};  // the model owns the allocations from here
  return model.adopt(c, std::move(w));
}

}  // namespace soartune::engine::bench
