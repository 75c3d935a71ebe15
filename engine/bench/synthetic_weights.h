// Synthetic weights made on the device for soartune-bench: a model shaped like a config (e.g. llama3-8b) in any
// weight format without the host memory or the time its real weights would take. Random, deterministic in the
// seed; timings only (the outputs mean nothing).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "engine/cuda/cuda_model.h"
#include "engine/model_config.h"
#include "kernels/weight_format.h"

namespace soartune::engine::bench {

struct SyntheticSpec {
  kernels::WeightFormat format = kernels::WeightFormat::kBf16;
  int group = 128;                 // quantised formats; 0 = per output channel
  uint64_t seed = 1;
  kernels::WeightFormat lm_head_format = kernels::WeightFormat::kBf16;  // bf16, int8 or int4 (groups of `group`)
};

// Makes the weights on model.stream()'s device and hands them to model.adopt().
Status generate_weights(cuda::CudaModel& model, const ModelConfig& config, const SyntheticSpec& spec);

}  // namespace soartune::engine::bench
