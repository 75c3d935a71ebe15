// A file of quantised weights (every quantised linear's codes and scales), so that a search does not
// re-quantise the same (model, method, bits, groups, overrides, calibration) for every trial. `key` spells all
// of those; a file whose stored key differs is not used. Layout: "SOARTUNEQ1", key length + key, then per
// linear in model order (per layer q, k, v, o, output gate, gate, up, down; then the lm_head): bits, group_size,
// out, in (int32), and for bits < 16 the codes [out][in] (int8) and scales [out][groups] (fp32).
#pragma once

#include <string>

#include "core/status.h"
#include "engine/weights.h"

namespace soartune::engine {

Status save_quantized(const ModelWeights& w, const std::string& path, const std::string& key);

// true: `w` (as loaded, 16-bit) now holds the cached quantised weights; false: no usable file for `key`.
Result<bool> load_quantized(ModelWeights& w, const std::string& path, const std::string& key);

// The file name for a key in `dir`: a 64-bit FNV-1a hash of the key, in hex, ".q".
std::string quantized_cache_file(const std::string& dir, const std::string& key);

}  // namespace soartune::engine
