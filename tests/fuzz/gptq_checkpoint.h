// What the two GPTQ import targets share: the checkpoint directory a target fills (the fuzzed file beside a fixed,
// valid counterpart from the other target's seeds), the load through the worker's entry point, and the checks
// on what loaded. The seeds are a one-layer Llama in the GPTQ format (scripts/fuzz-seeds.py gptq_checkpoints):
// attention at 4 bits, the MLP at 8 through a `dynamic` rule, group 32, the lm_head in bf16.
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/model_loader.h"
#include "scratch_dir.h"

namespace soartune::fuzz {

inline std::string read_seed(const std::string& relative) {
  std::ifstream in(std::string(SOARTUNE_SOURCE_DIR) + "/tests/fuzz/corpus/" + relative, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The process's scratch directory with `name` written once from the seed `seed` (the fixed half of the
// checkpoint; the target writes the fuzzed half on each input).
inline const ScratchDir& checkpoint_dir(const std::string& name, const std::string& seed) {
  static const ScratchDir& dir = [&]() -> const ScratchDir& {
    const ScratchDir& d = scratch_dir();
    d.write(name, read_seed(seed));
    return d;
  }();
  return dir;
}

// Every quantised linear holds codes of its width and one scale per group: what the CPU and CUDA backends
// index without further checks.
inline bool linear_holds(const engine::QuantizedLinear& l) {
  if (l.bits == 16) return l.q.empty() && l.scales.empty();
  if (l.bits != 4 && l.bits != 8) return false;
  if (l.q.size() != static_cast<std::size_t>(l.out) * l.in) return false;
  if (l.group_size < 0 || (l.group_size > 0 && l.in % l.group_size != 0)) return false;
  if (l.scales.size() != static_cast<std::size_t>(l.out) * l.groups_per_row()) return false;
  const int lo = -(1 << (l.bits - 1)), hi = (1 << (l.bits - 1)) - 1;
  for (int8_t c : l.q)
    if (c < lo || c > hi) return false;
  return true;
}

// Loads the directory as `model: hf:DIR` does; traps when a model that loaded breaks linear_holds.
inline void load_and_check(const ScratchDir& dir) {
  auto w = engine::load_model("hf:" + dir.path());
  if (!w.ok()) return;
  const engine::ModelWeights& m = w.value();
  for (const engine::LayerWeights& l : m.layers)
    for (const engine::QuantizedLinear* p : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_out_gate, &l.w_gate, &l.w_up, &l.w_down})
      if (!linear_holds(*p)) __builtin_trap();
  if (!linear_holds(m.lm_head)) __builtin_trap();
}

}  // namespace soartune::fuzz
