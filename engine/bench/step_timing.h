// soartune-bench's measurements of a CudaModel step: device time per stage of an eager step (through the model's
// StepObserver hook), device time of a captured decode graph replayed back to back, and a KV cache filled with
// random values (timing at a long context without prefilling it).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_model.h"

namespace soartune::engine::bench {

// Runs `step` eagerly with device events between the stages; returns each stage's device time summed over the
// layers (ms), in first-seen order.
Status profile_step(cuda::CudaModel& model, const Step& step, std::vector<std::pair<std::string, double>>* stages);

// Replays the decode graph of `batch` `reps` times back to back on the inputs of the last forward(); the device
// time per replay (ms): the step without the host's copies and sync.
Status replay_graph(cuda::CudaModel& model, int batch, int reps, double* ms_per_step);

// Every KV page of every layer filled with random finite values (as if prefilled).
Status fill_kv_random(cuda::CudaModel& model, uint64_t seed);

}  // namespace soartune::engine::bench
