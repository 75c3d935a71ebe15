// GPTQ on the GPU: the CPU solver's algorithm (engine/gptq_quantize.cc) with cuBLAS and cuSOLVER, for models
// whose Hessians and column sweeps take the CPU minutes per layer. Per group of linears sharing an input:
//   H = 2 X^T X / n        cublasSsyrk, fp32 as the CPU accumulates it, then fp64
//   dead inputs, damping   the CPU's rule (kernels/gptq.cuh)
//   H^-1 = U^T U           cusolverDnDpotrf, potri, potrf, fp64, once per group (the CPU factors the same matrix
//                          per linear)
// and per linear: static group scales from the 16-bit weights (the group maxima on the device, quant_scale on
// the host, so the scales are the CPU's to the bit), then the column sweep in blocks of kGptqBlock (the block
// kernel) with one DGEMM per block for the columns after it. The codes equal the CPU's but at rounding ties
// (tests/kernels/gptq_cuda_gpu_test.cc). The calibration forward's products between layers (forward) are one
// fp32 SGEMM each, W dequantised on the host's cores: at the 8B shape about a TFLOP a layer, minutes on one CPU
// core.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda/cuda_model.h"
#include "engine/gptq_quantize.h"
#include "engine/quantize.h"
#include "kernels/cuda_check.cuh"
#include "kernels/gptq.cuh"

namespace soartune::engine {

namespace {

namespace kn = soartune::kernels;

#define GPTQ_KERNEL_TRY(stmt) SOARTUNE_CUDA_TRY(stmt)
#define GPTQ_CUBLAS_TRY(stmt)                                                                              \
  do {                                                                                                     \
    cublasStatus_t e_ = (stmt);                                                                            \
    if (e_ != CUBLAS_STATUS_SUCCESS) return Status::Internal(std::string(#stmt) + ": cuBLAS status " + std::to_string(int(e_))); \
  } while (0)
#define GPTQ_CUSOLVER_TRY(stmt)                                                                            \
  do {                                                                                                     \
    cusolverStatus_t e_ = (stmt);                                                                          \
    if (e_ != CUSOLVER_STATUS_SUCCESS) return Status::Internal(std::string(#stmt) + ": cuSOLVER status " + std::to_string(int(e_))); \
  } while (0)
#define GPTQ_STATUS_TRY(expr)         \
  do {                                \
    Status s_ = (expr);               \
    if (!s_.ok()) return s_;          \
  } while (0)

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A device allocation that grows to the largest size asked of it and is reused across groups and linears.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p_); }
  Status ensure(std::size_t bytes) {
    if (bytes <= size_) return Status::Ok();
    cudaFree(p_);
    p_ = nullptr;
    size_ = 0;
    if (cudaMalloc(&p_, bytes) != cudaSuccess) {
      cudaGetLastError();
      return Status::Exhausted("gptq (cuda): cannot allocate " + std::to_string(bytes >> 20) + " MiB of device memory");
    }
    size_ = bytes;
    return Status::Ok();
  }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  std::size_t size_ = 0;
};

class CudaGptqSolver final : public GptqSolver {
 public:
  ~CudaGptqSolver() override {
    if (solver_) cusolverDnDestroy(solver_);
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status init(int device_index) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      return Status::Precondition("no CUDA device found");
    }
    if (device_index < 0 || device_index >= count)
      return Status::Invalid("device_index: " + std::to_string(device_index) + " is not in 0.." + std::to_string(count - 1));
    device_ = device_index;
    GPTQ_KERNEL_TRY(cudaSetDevice(device_));
    GPTQ_KERNEL_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    GPTQ_CUBLAS_TRY(cublasCreate(&cublas_));
    GPTQ_CUBLAS_TRY(cublasSetStream(cublas_, stream_));
    // fp32 stays fp32 (no TF32 for the Hessian: the CPU's is fp32); fp64 GEMMs are IEEE on tensor cores too.
    GPTQ_CUBLAS_TRY(cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH));
    GPTQ_CUSOLVER_TRY(cusolverDnCreate(&solver_));
    GPTQ_CUSOLVER_TRY(cusolverDnSetStream(solver_, stream_));
    return Status::Ok();
  }

  std::string name() const override { return "cuda"; }

  Status forward(const float* x, int tokens, const QuantizedLinear& l, float* y) override {
    const auto t0 = std::chrono::steady_clock::now();
    GPTQ_KERNEL_TRY(cudaSetDevice(device_));
    const std::size_t wn = static_cast<std::size_t>(l.out) * l.in, xn = static_cast<std::size_t>(tokens) * l.in,
                      yn = static_cast<std::size_t>(tokens) * l.out;
    // W in fp32 as the CPU forward takes it (dequantize_rows), rows split over the host's cores: every element is
    // computed alone, so the split does not change a value.
    host_w_.resize(wn);
    {
      const int parts = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
      const int per = (l.out + parts - 1) / parts;
      std::vector<std::thread> threads;
      for (int r0 = 0; r0 < l.out; r0 += per)
        threads.emplace_back([&, r0] { dequantize_rows(l, r0, std::min(per, l.out - r0), host_w_.data() + static_cast<std::size_t>(r0) * l.in); });
      for (std::thread& t : threads) t.join();
    }
    GPTQ_STATUS_TRY(fw_.ensure(wn * sizeof(float)));
    GPTQ_STATUS_TRY(fx_.ensure(xn * sizeof(float)));
    GPTQ_STATUS_TRY(fy_.ensure(yn * sizeof(float)));
    GPTQ_KERNEL_TRY(cudaMemcpyAsync(fw_.as<float>(), host_w_.data(), wn * sizeof(float), cudaMemcpyHostToDevice, stream_));
    GPTQ_KERNEL_TRY(cudaMemcpyAsync(fx_.as<float>(), x, xn * sizeof(float), cudaMemcpyHostToDevice, stream_));
    // Row-major Y [tokens][out] = X [tokens][in] W^T is, column-major, Y^T [out][tokens] = W [out][in] X^T: W's
    // row-major bytes are W^T column-major (ld in), hence op T; X's are X^T column-major (ld in).
    const float one = 1.f, zero = 0.f;
    GPTQ_CUBLAS_TRY(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, l.out, tokens, l.in, &one, fw_.as<float>(), l.in,
                                fx_.as<float>(), l.in, &zero, fy_.as<float>(), l.out));
    GPTQ_KERNEL_TRY(cudaMemcpyAsync(y, fy_.as<float>(), yn * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    GPTQ_KERNEL_TRY(cudaStreamSynchronize(stream_));
    if (!l.bias.empty())
      for (std::size_t t = 0; t < static_cast<std::size_t>(tokens); ++t)
        for (int o = 0; o < l.out; ++o) y[t * l.out + o] += l.bias[static_cast<std::size_t>(o)];
    seconds_.forward += seconds_since(t0);
    ++seconds_.forwards;
    return Status::Ok();
  }

  Status quantize_group(const float* x, int tokens, int in, std::span<const GptqLinear> linears, int group_size,
                        const GptqOptions& options) override {
    if (linears.empty()) return Status::Ok();
    // Every linear reads the one factor of this input's Hessian and the dead-input mask, both `in` wide.
    for (const GptqLinear& l : linears)
      if (l.linear->in != in || l.linear->w16.size() != static_cast<std::size_t>(l.linear->out) * in)
        return Status::Invalid("gptq (cuda): a linear of " + std::to_string(l.linear->out) + " x " + std::to_string(l.linear->in) +
                               " with " + std::to_string(l.linear->w16.size()) + " 16-bit weights in a group whose input is " +
                               std::to_string(in) + " wide");
    GPTQ_KERNEL_TRY(cudaSetDevice(device_));
    const std::size_t nn = static_cast<std::size_t>(in) * in;
    GPTQ_STATUS_TRY(x_.ensure(static_cast<std::size_t>(tokens) * in * 4));
    GPTQ_STATUS_TRY(h32_.ensure(nn * 4));
    GPTQ_STATUS_TRY(h_.ensure(nn * 8));
    GPTQ_STATUS_TRY(dead_.ensure(static_cast<std::size_t>(in)));
    GPTQ_STATUS_TRY(info_.ensure(sizeof(int)));

    auto t = std::chrono::steady_clock::now();
    GPTQ_KERNEL_TRY(cudaMemcpyAsync(x_.as<float>(), x, static_cast<std::size_t>(tokens) * in * 4, cudaMemcpyHostToDevice, stream_));
    GPTQ_KERNEL_TRY(cudaStreamSynchronize(stream_));
    seconds_.transfer += seconds_since(t);

    // H = 2/n X^T X: x is row-major [tokens][in], i.e. column-major X^T [in][tokens] with leading dimension in.
    t = std::chrono::steady_clock::now();
    const float alpha = 2.f / static_cast<float>(tokens), beta = 0.f;
    GPTQ_CUBLAS_TRY(cublasSsyrk(cublas_, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, in, tokens, &alpha, x_.as<float>(), in, &beta,
                                h32_.as<float>(), in));
    GPTQ_KERNEL_TRY(kn::gptq_hessian_to_f64(h32_.as<float>(), h_.as<double>(), in, stream_));
    GPTQ_KERNEL_TRY(cudaStreamSynchronize(stream_));
    seconds_.hessian += seconds_since(t);
    ++seconds_.hessians;

    // The Cholesky factor U of the damped H^-1, held as its transpose (the lower factor, column-major), so a
    // row of U is a contiguous column.
    t = std::chrono::steady_clock::now();
    GPTQ_KERNEL_TRY(kn::gptq_dead_and_damp(h_.as<double>(), dead_.as<uint8_t>(), in, options.damp_pct, stream_));
    int lwork_f = 0, lwork_i = 0;
    GPTQ_CUSOLVER_TRY(cusolverDnDpotrf_bufferSize(solver_, CUBLAS_FILL_MODE_LOWER, in, h_.as<double>(), in, &lwork_f));
    GPTQ_CUSOLVER_TRY(cusolverDnDpotri_bufferSize(solver_, CUBLAS_FILL_MODE_LOWER, in, h_.as<double>(), in, &lwork_i));
    GPTQ_STATUS_TRY(work_.ensure(static_cast<std::size_t>(std::max(lwork_f, lwork_i)) * 8));
    int info = 0;
    GPTQ_CUSOLVER_TRY(cusolverDnDpotrf(solver_, CUBLAS_FILL_MODE_LOWER, in, h_.as<double>(), in, work_.as<double>(), lwork_f,
                                       info_.as<int>()));
    GPTQ_STATUS_TRY(read_info("cusolverDnDpotrf (H)", info));
    if (info > 0)
      return Status::Invalid("gptq: the damped Hessian of a linear with " + std::to_string(in) +
                             " inputs is not positive definite; raise calibration.damp_pct");
    GPTQ_CUSOLVER_TRY(cusolverDnDpotri(solver_, CUBLAS_FILL_MODE_LOWER, in, h_.as<double>(), in, work_.as<double>(), lwork_i,
                                       info_.as<int>()));
    GPTQ_STATUS_TRY(read_info("cusolverDnDpotri", info));
    if (info > 0) return Status::Internal("gptq: cusolverDnDpotri found the factor singular");
    GPTQ_CUSOLVER_TRY(cusolverDnDpotrf(solver_, CUBLAS_FILL_MODE_LOWER, in, h_.as<double>(), in, work_.as<double>(), lwork_f,
                                       info_.as<int>()));
    GPTQ_STATUS_TRY(read_info("cusolverDnDpotrf (H^-1)", info));
    if (info > 0) return Status::Internal("gptq: the inverse Hessian has no Cholesky factor");
    seconds_.cholesky += seconds_since(t);

    for (const GptqLinear& l : linears) GPTQ_STATUS_TRY(sweep(*l.linear, l.bits, group_size));
    return Status::Ok();
  }

 private:
  // cuSOLVER's devInfo of the last call into `info`: 0 when it succeeded, i > 0 when the leading minor of order i
  // is not positive definite. A failed read or a negative value (an argument cuSOLVER refused) is an error of
  // its own, not a verdict on the matrix.
  Status read_info(const char* call, int& info) {
    GPTQ_KERNEL_TRY(cudaMemcpyAsync(&info, info_.as<int>(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
    GPTQ_KERNEL_TRY(cudaStreamSynchronize(stream_));
    if (info < 0) return Status::Internal(std::string("gptq: ") + call + " refused its argument " + std::to_string(-info));
    return Status::Ok();
  }

  // One linear whose input's factor is in h_: scales, codes, and the 16-bit weights dropped, as the CPU does.
  Status sweep(QuantizedLinear& l, int bits, int group_size) {
    const int rows = l.out, n = l.in, qmax = (1 << (bits - 1)) - 1;
    const int gsize = group_size == 0 ? n : group_size, groups = n / gsize;
    const std::size_t count = static_cast<std::size_t>(rows) * n;
    GPTQ_STATUS_TRY(w16_.ensure(count * 2));
    GPTQ_STATUS_TRY(w_.ensure(count * 8));
    GPTQ_STATUS_TRY(codes_.ensure(count));
    GPTQ_STATUS_TRY(err_.ensure(static_cast<std::size_t>(rows) * kn::kGptqBlock * 8));
    GPTQ_STATUS_TRY(scales_.ensure(static_cast<std::size_t>(rows) * groups * 4));

    auto t = std::chrono::steady_clock::now();
    GPTQ_KERNEL_TRY(cudaMemcpyAsync(w16_.as<uint16_t>(), l.w16.data(), count * 2, cudaMemcpyHostToDevice, stream_));
    GPTQ_KERNEL_TRY(kn::gptq_weights_f64(w16_.as<uint16_t>(), l.dtype16 == Dtype16::kBF16, dead_.as<uint8_t>(), w_.as<double>(),
                                         rows, n, stream_));
    GPTQ_KERNEL_TRY(kn::gptq_group_amax(w_.as<double>(), scales_.as<float>(), rows, n, gsize, stream_));
    std::vector<float> scales(static_cast<std::size_t>(rows) * groups);
    GPTQ_KERNEL_TRY(cudaMemcpyAsync(scales.data(), scales_.as<float>(), scales.size() * 4, cudaMemcpyDeviceToHost, stream_));
    GPTQ_KERNEL_TRY(cudaStreamSynchronize(stream_));
    for (float& s : scales) s = quant_scale(s, bits);
    GPTQ_KERNEL_TRY(cudaMemcpyAsync(scales_.as<float>(), scales.data(), scales.size() * 4, cudaMemcpyHostToDevice, stream_));
    GPTQ_KERNEL_TRY(cudaStreamSynchronize(stream_));
    seconds_.transfer += seconds_since(t);

    t = std::chrono::steady_clock::now();
    const double minus_one = -1.0, one = 1.0;
    for (int j1 = 0; j1 < n; j1 += kn::kGptqBlock) {
      const int block = std::min(kn::kGptqBlock, n - j1);
      kn::GptqBlockArgs a;
      a.w = w_.as<double>();
      a.l = h_.as<double>();
      a.scales = scales_.as<float>();
      a.codes = codes_.as<int8_t>();
      a.err = err_.as<double>();
      a.out = rows;
      a.n = n;
      a.j1 = j1;
      a.count = block;
      a.gsize = gsize;
      a.groups = groups;
      a.qmax = qmax;
      GPTQ_KERNEL_TRY(kn::gptq_block_run(a, stream_));
      // W[:, j1+block:] -= Err [rows][block] * U[j1:j1+block, j1+block:], U read through its transpose.
      const int rest = n - j1 - block;
      if (rest > 0)
        GPTQ_CUBLAS_TRY(cublasDgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, rows, rest, block, &minus_one, err_.as<double>(), rows,
                                    h_.as<double>() + (j1 + block) + static_cast<std::size_t>(j1) * n, n, &one,
                                    w_.as<double>() + static_cast<std::size_t>(j1 + block) * rows, rows));
    }
    GPTQ_KERNEL_TRY(cudaStreamSynchronize(stream_));
    seconds_.columns += seconds_since(t);
    ++seconds_.linears;

    t = std::chrono::steady_clock::now();
    l.q.resize(count);
    GPTQ_KERNEL_TRY(cudaMemcpyAsync(l.q.data(), codes_.as<int8_t>(), count, cudaMemcpyDeviceToHost, stream_));
    GPTQ_KERNEL_TRY(cudaStreamSynchronize(stream_));
    seconds_.transfer += seconds_since(t);
    l.scales = std::move(scales);
    l.bits = bits;
    l.group_size = group_size;
    l.w16.clear();
    l.w16.shrink_to_fit();
    return Status::Ok();
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cusolverDnHandle_t solver_ = nullptr;
  DeviceBuffer x_, h32_, h_, dead_, info_, work_;   // per group
  DeviceBuffer w16_, w_, codes_, err_, scales_;      // per linear
  DeviceBuffer fw_, fx_, fy_;                        // forward: W, X, Y in fp32
  std::vector<float> host_w_;
};

}  // namespace

Result<std::unique_ptr<GptqSolver>> make_cuda_gptq_solver(int device_index) {
  auto s = std::make_unique<CudaGptqSolver>();
  if (Status st = s->init(device_index); !st.ok()) return st;
  return std::unique_ptr<GptqSolver>(std::move(s));
}

}  // namespace soartune::engine
