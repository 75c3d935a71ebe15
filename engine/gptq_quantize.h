// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
// Transformers") as a transform of ModelWeights, the knob quant_method: gptq. Same grid as quantize.h
// (symmetric, scale = max|w| / qmax at fp16 precision, per group of the input dim), but each code is chosen
// column by column and the rounding error of a column is spread over the columns not yet quantised through the
// inverse Hessian of the layer's inputs, H = 2 X^T X / n + damp * mean(diag H) * I (Cholesky, Eigen, fp64).
// Scales are static (each group's from the weights before compensation, as GPTQModel's static_groups); the
// sweep goes in input order, so the checkpoint is desc_act false with g_idx = i / group_size.
// Layers are quantised in order: each linear's inputs X come from a forward pass of the calibration tokens
// through the layers already quantised (q/k/v, then o_proj, then gate/up, then down_proj, then the lm_head when
// lm_head_bits quantises it). The forward's products X W^T go through the solver (GptqSolver::forward: Eigen on
// the CPU, cuBLAS fp32 on the GPU); norms, RoPE, attention and SiLU run on the CPU. Llama-family models only (the
// forward here has no lightning layers).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/launch_config.h"
#include "core/status.h"
#include "engine/weights.h"

namespace soartune::engine {

struct GptqOptions {
  double damp_pct = 1.0;   // damping, percent of the mean of diag(H) (the paper's and GPTQModel's default 1%)
  int block = 128;         // columns per lazy-update block (changes speed only, not the result beyond rounding)
};

// Where a solver's time went, summed over its calls (seconds): the Hessians from the activations, the Cholesky
// factor of each damped inverse Hessian, the column sweeps, (GPU) host <-> device copies, and the forward pass's
// products between layers (copies included).
struct GptqStageSeconds {
  double hessian = 0, cholesky = 0, columns = 0, transfer = 0;
  int hessians = 0, linears = 0;
  double forward = 0;
  int forwards = 0;
};

// One linear to quantise and its width (4 or 8; already checked by check_quantizable).
struct GptqLinear {
  QuantizedLinear* linear = nullptr;
  int bits = 16;
};

// The numeric work of GPTQ for the linears that share one input: H from the input, then each linear's codes and
// scales. The CPU solver (Eigen, below) is the reference; engine/cuda/gptq_cuda.cc runs the same algorithm on the
// GPU (cuBLAS / cuSOLVER) for the worker when a trial runs on CUDA. Both give the same scales and, but for codes
// at rounding ties, the same codes.
class GptqSolver {
 public:
  virtual ~GptqSolver() = default;
  virtual std::string name() const = 0;   // "cpu" | "cuda"
  // x: [tokens][in] row-major fp32, the common input of every linear in `linears`.
  virtual Status quantize_group(const float* x, int tokens, int in, std::span<const GptqLinear> linears, int group_size,
                                const GptqOptions& options) = 0;
  // y [tokens][l.out] row-major = x [tokens][l.in] W^T (+ bias), W as the backends compute with it (quantised
  // codes times their scales, or the 16-bit values, in fp32): the calibration forward's products. This one is the
  // reference (Eigen, one thread); the GPU solver's runs on cuBLAS in fp32 (no TF32), so a large model's forward
  // takes seconds instead of the CPU's minutes, its sums in another order.
  virtual Status forward(const float* x, int tokens, const QuantizedLinear& l, float* y);
  const GptqStageSeconds& seconds() const { return seconds_; }

 protected:
  GptqStageSeconds seconds_;
};

std::unique_ptr<GptqSolver> make_cpu_gptq_solver();

// The GPU solver on device `device_index` (engine/cuda/gptq_cuda.cc, target soartune_engine_cuda). Fails with
// kFailedPrecondition when no device can be used; builds without engine/cuda link engine/cuda_backend_stub.cc,
// which fails with "CUDA backend not built".
Result<std::unique_ptr<GptqSolver>> make_cuda_gptq_solver(int device_index = 0);

// Quantises `w` (16-bit) under `launch` (bits per projection as quantize_model) with calibration sequences;
// `solver` null: the CPU one, which also runs the forward pass's products (GptqSolver::forward). Calibration
// without tokens, or activations that are not finite, are refused (kInvalidArgument) before any solver sees them.
Status gptq_quantize_model(ModelWeights& w, const LaunchConfig& launch, const std::vector<std::vector<int32_t>>& calibration,
                           const GptqOptions& options = {}, GptqSolver* solver = nullptr);

// One linear from 16-bit to `bits` with `group_size` given its input Hessian H [in][in] (row-major, fp64).
Status gptq_quantize_linear(QuantizedLinear& l, int bits, int group_size, std::vector<double> hessian, const GptqOptions& options,
                            GptqStageSeconds* seconds = nullptr);

}  // namespace soartune::engine
