// The interface the engine drives. The engine owns the logical side of the paged KV cache (page allocator,
// one block table per sequence; kv_cache.h) and the scheduler; a Backend owns the weights on its device,
// the physical KV pages in the chosen dtype, and the per-step buffers, and runs one forward pass per step.
//
// A step is a flattened batch of T tokens from several sequences: prefill chunks and decode tokens mixed,
// each sequence's tokens contiguous and in position order. For every token the backend computes the
// decoder, writes that token's K/V (after RoPE) into the cache at its position (page
// block_table[pos / page_size], row pos % page_size), and attends causally over positions 0..pos of its
// own sequence. Only the rows named in `output_rows` go through the final norm and lm_head.
// A lightning-attention layer (MiniCPM-SALA) keeps no KV: it carries one fixed-size state per sequence slot
// instead, which the backend resets at the sequence's first token (start_pos == 0) and advances in position
// order, so a slot's state is only ever read by the sequence occupying it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/launch_config.h"
#include "core/status.h"
#include "core/worker_result.h"
#include "engine/weights.h"

namespace soartune::engine {

struct StepSequence {
  int slot = 0;                          // sequence slot, 0 .. max_sequences-1 (stable while it runs)
  int first_token = 0;                   // index in Step::tokens of this sequence's first token
  int num_tokens = 0;                    // tokens of this sequence in this step (chunk length, or 1)
  int start_pos = 0;                     // position of its first token here = tokens already cached
  std::span<const int32_t> block_table;  // physical pages of this sequence, in order; covers
                                         // start_pos + num_tokens positions
};

struct Step {
  std::span<const int32_t> tokens;       // [T] token ids
  std::span<const int32_t> positions;    // [T] position of each token in its sequence
  std::span<const StepSequence> seqs;    // sequences in token order
  std::span<const int32_t> output_rows;  // [R] indices into tokens whose next-token outputs are wanted
  int decode_tokens = 0;                 // how many seqs have num_tokens == 1 and start_pos > 0 (a hint:
                                         // a step of only decode tokens may replay a captured graph)
};

struct StepOutput {
  std::span<int32_t> argmax;             // [R] greedy next token per output row (ties: lowest id)
  std::span<float> logits;               // [R][vocab] fp32 logits; empty = not wanted this step
  std::span<float> residual_stream;      // [layers + 1][T][hidden]: the scaled embedding, then the residual
                                         // stream after each layer, to bisect a mismatch against a reference
                                         // layer by layer; empty = not wanted. Both backends fill it (CUDA:
                                         // the step runs eager, copying the stream out after every layer).
};

struct BackendPlan {
  const ModelWeights* weights = nullptr; // quantised host weights; valid during prepare() only
  LaunchConfig launch;                   // kv dtype, page size, mem fraction, kernel knobs
  int max_sequences = 1;                 // slots (= max_running_requests, or more for the accuracy pass)
  int max_step_tokens = 1;               // largest T of any step (prefill budget + decode tokens)
  int max_output_rows = 1;               // largest R of any step
  int max_context = 1;                   // longest sequence (prompt + output) any step will see
  int kv_pages = 0;                      // pages to allocate; 0 = the backend decides (CPU: enough for
                                         // max_sequences * max_context; CUDA: what mem_fraction_pct allows).
                                         // kv_pages() says how many it made; the scheduler uses exactly those
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;             // "cpu" or "cuda"
  virtual std::string device() const = 0;           // e.g. "cpu: 2 threads", "NVIDIA H200 (sm_90)"
  // Uploads/repacks the weights, allocates the KV pages and every step buffer. After it returns no
  // call to forward() allocates. A plan the backend cannot run (a kernel variant that cannot implement
  // the shape, too little memory) is an error here, naming the knob where one is at fault.
  virtual Status prepare(const BackendPlan& plan) = 0;
  virtual int kv_pages() const = 0;                 // pages prepare() allocated
  virtual Status forward(const Step& step, StepOutput& out) = 0;
  virtual std::size_t peak_memory_bytes() const = 0;  // device memory high-water mark (CPU: peak RSS)
  // The kernel plans prepare() made (variant, tiles, splits, grid per op and shape); none for the CPU.
  virtual std::vector<KernelPlan> kernel_plans() const { return {}; }
};

// The fp32 reference backend (Eigen). threads <= 0: hardware concurrency.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

// Implemented in engine/cuda/ (target soartune_engine_cuda). Fails with kFailedPrecondition when no
// usable device exists (the caller of --backend auto then falls back to the CPU). Builds without the
// CUDA backend link engine/cuda_backend_stub.cc instead, which fails with "CUDA backend not built".
Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index = 0);

}  // namespace soartune::engine
