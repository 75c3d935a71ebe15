// Weight quantisation as a transform of ModelWeights (gpt-fast style: the model code never sees bit widths).
// Symmetric round-to-nearest: per group of `group_size` input elements of an output row (0: the whole row),
// scale = max|w| / qmax rounded to fp16 precision, qmax = 2^(bits-1) - 1, q = clamp(round(w / scale), -qmax, qmax).
// Bits per projection follow LaunchConfig::weight_bits_for (overrides, edge layers, the layer type's bits by its
// mixer, attention bits); the
// lm_head takes lm_head_bits (16 by default; a tied lm_head is a copy, so the embeddings stay 16-bit).
#pragma once

#include "core/launch_config.h"
#include "core/status.h"
#include "engine/weights.h"

namespace soartune::engine {

// Rewrites every decoder linear of `w` whose chosen bits are below 16, and the lm_head when lm_head_bits is.
// Fails (naming launch.weight_group_size) when a group size does not divide a projection's input width.
Status quantize_model(ModelWeights& w, const LaunchConfig& launch);

// The scale of a group whose largest magnitude is `amax`: amax / (2^(bits-1) - 1) at fp16 precision (1 for an
// all-zero group). The one rule RTN and GPTQ (gptq_quantize.h) share.
float quant_scale(float amax, int bits);

// Checks that `l` (16-bit) can be quantised to `bits` with `group_size`: errors name the launch knob.
Status check_quantizable(const QuantizedLinear& l, int bits, int group_size);

// One linear from 16-bit to `bits` (8 or 4) with `group_size`; 16 leaves it as is.
Status quantize_linear(QuantizedLinear& l, int bits, int group_size);

}  // namespace soartune::engine
