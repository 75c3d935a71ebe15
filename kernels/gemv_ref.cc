#include "kernels/gemv_ref.h"

#include <vector>

#include "kernels/numeric_formats.h"

namespace soartune::kernels {

void pack_int4_rows(const int8_t* q, int n, int k, uint8_t* dst) {
  for (int r = 0; r < n; ++r) {
    for (int blk = 0; blk < k / 32; ++blk) {
      uint32_t* words = reinterpret_cast<uint32_t*>(dst + (int64_t(r) * k / 2) + blk * 16);
      for (int j = 0; j < 4; ++j) {
        uint32_t word = 0;
        for (int i = 0; i < 4; ++i) {
          const int k0 = blk * 32 + 8 * j + 2 * i;
          const uint32_t lo = uint32_t(q[int64_t(r) * k + k0] + 8) & 0xFu;
          const uint32_t hi = uint32_t(q[int64_t(r) * k + k0 + 1] + 8) & 0xFu;
          word |= lo << (4 * i);
          word |= hi << (16 + 4 * i);
        }
        words[j] = word;  // little-endian hosts only, as the device
      }
    }
  }
}

int int4_code_at(const uint8_t* packed, int k, int row, int col) {
  const int blk = col / 32, e = col % 32, j = e / 8, i = (e % 8) / 2, hi = e % 2;
  uint32_t word;
  const uint8_t* p = packed + int64_t(row) * k / 2 + blk * 16 + 4 * j;
  word = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  return int((word >> (hi * 16 + 4 * i)) & 0xFu) - 8;
}

float linear_weight_at(const HostLinear& w, int row, int col) {
  const int64_t idx = int64_t(row) * w.k + col;
  switch (w.format) {
    case WeightFormat::kBf16: return bf16_to_f32(static_cast<const uint16_t*>(w.w)[idx]);
    case WeightFormat::kFp16: return fp16_to_f32(static_cast<const uint16_t*>(w.w)[idx]);
    case WeightFormat::kInt8:
      return float(static_cast<const int8_t*>(w.w)[idx]) * w.scales[int64_t(row) * (w.k / w.group) + col / w.group];
    case WeightFormat::kInt4:
      return float(int4_code_at(static_cast<const uint8_t*>(w.w), w.k, row, col)) *
             w.scales[int64_t(row) * (w.k / w.group) + col / w.group];
  }
  return 0.f;
}

void linear_ref(const HostLinear& w, const float* x, int batch, float* y) {
  std::vector<float> row(w.k);
  for (int n = 0; n < w.n; ++n) {
    for (int c = 0; c < w.k; ++c) row[c] = linear_weight_at(w, n, c);
    for (int b = 0; b < batch; ++b) {
      double s = 0;
      for (int c = 0; c < w.k; ++c) s += double(row[c]) * x[int64_t(b) * w.k + c];
      y[int64_t(b) * w.n + n] = float(s);
    }
  }
}

}  // namespace soartune::kernels
