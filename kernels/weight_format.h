// Device weight formats of a linear layer y[b][n] = sum_k x[b][k] * W[n][k], as the GEMV/GEMM kernels read them.
// Plain C++ so host code (upload, repack, CPU twins, tests) shares it.
//
//   kBf16 / kFp16  w:      [N][K] 16-bit values, row-major
//   kInt8          w:      [N][K] int8 codes q in [-128, 127], row-major
//                  scales: [N][K / group] fp32; W[n][k] = q[n][k] * scales[n][k / group]
//   kInt4          w:      [N][K / 2] bytes: each 16-byte block holds 32 consecutive k of one row, as four
//                          32-bit words; word j holds k = 8j .. 8j+7 of the block, element 8j+2i in bits
//                          4i..4i+3 and element 8j+2i+1 in bits 16+4i..16+4i+3, stored as q + 8 (q in [-8, 7]),
//                          so one mask-and-or turns a word into two bf16 pairs (see gemv.cu)
//                  scales: [N][K / group] fp32, group in {32, 64, 128, 256} or K (per channel)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace soartune::kernels {

enum class WeightFormat : int { kBf16 = 0, kFp16 = 1, kInt8 = 2, kInt4 = 3 };

inline constexpr const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kBf16: return "bf16";
    case WeightFormat::kFp16: return "fp16";
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kInt4: return "int4";
  }
  return "?";
}

inline constexpr bool is_quantized(WeightFormat f) {
  return f == WeightFormat::kInt8 || f == WeightFormat::kInt4;
}

// Bytes of the packed weight codes of an [n][k] matrix (scales not included).
inline constexpr size_t weight_bytes(WeightFormat f, int64_t n, int64_t k) {
  switch (f) {
    case WeightFormat::kBf16:
    case WeightFormat::kFp16: return size_t(n * k * 2);
    case WeightFormat::kInt8: return size_t(n * k);
    case WeightFormat::kInt4: return size_t(n * k / 2);
  }
  return 0;
}

// Bytes of the scales (0 for 16-bit formats).
inline constexpr size_t scale_bytes(WeightFormat f, int64_t n, int64_t k, int64_t group) {
  return is_quantized(f) && group > 0 ? size_t(n * (k / group) * 4) : 0;
}

// One device linear layer: what every GEMV / GEMM launcher takes.
struct DeviceLinear {
  WeightFormat format = WeightFormat::kBf16;
  int n = 0;                  // output rows
  int k = 0;                  // input columns
  int group = 0;              // quantised: k elements per scale (k itself for per-channel)
  const void* w = nullptr;    // device, layout above
  const float* scales = nullptr;  // device [n][k / group] (quantised only)
};

// Packs int8 codes q [n][k] (each in [-8, 7]) into the kInt4 layout above: dst has n * k / 2 bytes; k % 32 == 0.
void pack_int4_rows(const int8_t* q, int n, int k, uint8_t* dst);
// The inverse: code of element (row, col) of a kInt4 matrix.
int int4_code_at(const uint8_t* packed, int k, int row, int col);

}  // namespace soartune::kernels
