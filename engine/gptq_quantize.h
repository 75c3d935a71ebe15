// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
// Transformers") as a transform of ModelWeights, the knob quant_method: gptq. Same grid as quantize.h
// (symmetric, scale = max|w| / qmax at fp16 precision, per group of the input dim), but each code is chosen
// column by column and the rounding error of a column is spread over the columns not yet quantised through the
// inverse Hessian of the layer's inputs, H = 2 X^T X / n + damp * mean(diag H) * I (Cholesky, Eigen, fp64).
// Scales are static (each group's from the weights before compensation, as GPTQModel's static_groups); the
// sweep goes in input order, so the checkpoint is desc_act false with g_idx = i / group_size.
// Layers are quantised in order: each linear's inputs X come from a forward pass of the calibration tokens
// through the layers already quantised (q/k/v, then o_proj, then gate/up, then down_proj, then the lm_head when
// lm_head_bits quantises it). Llama-family models only (the CPU forward here has no lightning layers).
#pragma once

#include <cstdint>
#include <vector>

#include "core/launch_config.h"
#include "core/status.h"
#include "engine/weights.h"

namespace soartune::engine {

struct GptqOptions {
  double damp_pct = 1.0;   // damping, percent of the mean of diag(H) (the paper's and GPTQModel's default 1%)
  int block = 128;         // columns per lazy-update block (changes speed only, not the result beyond rounding)
};

// Quantises `w` (16-bit) under `launch` (bits per projection as quantize_model) with calibration sequences.
Status gptq_quantize_model(ModelWeights& w, const LaunchConfig& launch, const std::vector<std::vector<int32_t>>& calibration,
                           const GptqOptions& options = {});

// One linear from 16-bit to `bits` with `group_size` given its input Hessian H [in][in] (row-major, fp64).
Status gptq_quantize_linear(QuantizedLinear& l, int bits, int group_size, std::vector<double> hessian, const GptqOptions& options);

}  // namespace soartune::engine
