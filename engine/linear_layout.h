// The bytes of one device linear as the CUDA kernels read it (kernels/weight_format.h), produced a range of rows
// at a time straight from the host weights: the parts' rows one after another (q, k, v[, gate] as one qkv), or a
// gate|up pair interleaved by eight rows (gate row j at j / 8 * 16 + j % 8, up row j eight rows on; the order the
// GEMV's fused SwiGLU reads, kernels/gemv.cuh). No copy of the whole matrix is made: an upload fills a staging
// buffer slice by slice, from several threads, each writing rows of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/weights.h"
#include "kernels/weight_format.h"

namespace soartune::engine {

class LinearLayout {
 public:
  // parts share input width, bits, group size and 16-bit type; interleave: exactly {gate, up} of equal width, a
  // multiple of 8. Errors name what differs.
  static Result<LinearLayout> make(const std::vector<const QuantizedLinear*>& parts, bool interleave);

  kernels::WeightFormat format() const { return format_; }
  int n() const { return n_; }
  int k() const { return k_; }
  int group() const { return group_; }                  // 0 for 16-bit formats
  std::size_t row_bytes() const { return row_bytes_; }  // of the codes
  int scales_per_row() const { return scales_per_row_; }  // 0 for 16-bit formats
  std::size_t weight_bytes() const { return row_bytes_ * std::size_t(n_); }
  std::size_t scale_bytes() const { return std::size_t(scales_per_row_) * std::size_t(n_) * 4; }

  // Rows [r0, r1) of the device matrix into dst (row r0 first, row_bytes() each).
  void write_rows(int r0, int r1, uint8_t* dst) const;
  // Their scales into dst (scales_per_row() floats a row); nothing for 16-bit formats.
  void write_scales(int r0, int r1, float* dst) const;

 private:
  // The part and its row that device row r holds.
  void source(int r, int* part, int* row) const;

  std::vector<const QuantizedLinear*> parts_;
  std::vector<int> first_row_;  // device row of each part's row 0 (not interleaved)
  kernels::WeightFormat format_ = kernels::WeightFormat::kBf16;
  int n_ = 0, k_ = 0, group_ = 0, scales_per_row_ = 0;
  std::size_t row_bytes_ = 0;
  bool interleave_ = false;
};

}  // namespace soartune::engine
