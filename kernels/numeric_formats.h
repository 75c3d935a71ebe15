// Scalar conversions between fp32 and the 16-bit and 8-bit storage formats of weights and the KV cache.
// Plain C++ for host code; under nvcc every function is also a device function (SOARTUNE_HD).
// All float -> narrow conversions round to nearest, ties to even. fp8 e4m3 (no infinities, max 448)
// saturates to +-448; fp8 e5m2 and fp16 overflow to infinity as IEEE does; NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SOARTUNE_HD __host__ __device__ __forceinline__
#else
#define SOARTUNE_HD inline
#endif

namespace soartune::kernels {

SOARTUNE_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SOARTUNE_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- bf16: the top 16 bits of an fp32 ----
SOARTUNE_HD float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

SOARTUNE_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// ---- Generic narrow float with E exponent bits and M mantissa bits (bias 2^(E-1)-1) ----
// Encodes |f| (sign handled by the caller) to the nearest representable value, ties to even,
// including subnormals. Returns the magnitude code; values beyond max_code saturate to max_code when
// `saturate`, else give inf_code.
template <int E, int M>
SOARTUNE_HD uint32_t encode_magnitude(float af, uint32_t max_code, bool saturate, uint32_t inf_code) {
  constexpr int kBias = (1 << (E - 1)) - 1;
  const uint32_t u = f32_bits(af);
  const int exp32 = static_cast<int>(u >> 23) - 127;
  uint32_t code;
  if (u == 0) return 0;
  if (exp32 < 1 - kBias) {
    // Subnormal in the target: value = mant * 2^(1-bias-M). Scale to an integer and round.
    const float scaled = af * bits_f32(static_cast<uint32_t>(127 - (1 - kBias - M)) << 23);  // af * 2^-(1-bias-M)
    // Round half to even on the integer `scaled` (< 2^M+1, exact in fp32).
    const float fl = static_cast<float>(static_cast<uint32_t>(scaled));
    uint32_t m = static_cast<uint32_t>(fl);
    const float rem = scaled - fl;
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    code = m;  // m == 2^M rolls over into the smallest normal, which is the right code
  } else {
    // Normal: keep M mantissa bits of the fp32 mantissa, round to nearest even on the dropped bits.
    const uint32_t mant = u & 0x7fffffu;
    const int drop = 23 - M;
    uint32_t kept = mant >> drop;
    const uint32_t rest = mant & ((1u << drop) - 1u);
    const uint32_t half = 1u << (drop - 1);
    code = (static_cast<uint32_t>(exp32 + kBias) << M) | kept;
    if (rest > half || (rest == half && (kept & 1u))) ++code;  // may carry into the exponent: correct
  }
  if (code > max_code) return saturate ? max_code : inf_code;
  return code;
}

template <int E, int M>
SOARTUNE_HD float decode_magnitude(uint32_t code) {
  constexpr int kBias = (1 << (E - 1)) - 1;
  const uint32_t e = code >> M;
  const uint32_t m = code & ((1u << M) - 1u);
  if (e == 0) return static_cast<float>(m) * bits_f32(static_cast<uint32_t>(127 + 1 - kBias - M) << 23);
  return bits_f32((static_cast<uint32_t>(static_cast<int>(e) - kBias + 127) << 23) | (m << (23 - M)));
}

// ---- fp16 (IEEE binary16) ----
SOARTUNE_HD uint16_t f32_to_fp16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if ((u & 0x7fffffffu) == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  const uint32_t mag = encode_magnitude<5, 10>(bits_f32(u & 0x7fffffffu), 0x7bffu, false, 0x7c00u);
  return static_cast<uint16_t>(sign | mag);
}

SOARTUNE_HD float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t mag = h & 0x7fffu;
  if (mag >= 0x7c00u) return bits_f32(sign | 0x7f800000u | ((mag & 0x3ffu) << 13));
  return bits_f32(sign | f32_bits(decode_magnitude<5, 10>(mag)));
}

// ---- fp8 e4m3 (OCP "fn": no infinities, 0x7f is NaN, max 448) ----
SOARTUNE_HD uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if ((u & 0x7fffffffu) == 0x7f800000u) return static_cast<uint8_t>(sign | 0x7eu);  // saturate
  return static_cast<uint8_t>(sign | encode_magnitude<4, 3>(bits_f32(u & 0x7fffffffu), 0x7eu, true, 0x7eu));
}

SOARTUNE_HD float fp8_e4m3_to_f32(uint8_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x80u) << 24;
  const uint32_t mag = h & 0x7fu;
  if (mag == 0x7fu) return bits_f32(0x7fc00000u | sign);
  return bits_f32(sign | f32_bits(decode_magnitude<4, 3>(mag)));
}

// ---- fp8 e5m2 (IEEE-like: infinities and NaNs, max 57344) ----
SOARTUNE_HD uint8_t f32_to_fp8_e5m2(float f) {
  const uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if ((u & 0x7fffffffu) == 0x7f800000u) return static_cast<uint8_t>(sign | 0x7cu);
  return static_cast<uint8_t>(sign | encode_magnitude<5, 2>(bits_f32(u & 0x7fffffffu), 0x7bu, false, 0x7cu));
}

SOARTUNE_HD float fp8_e5m2_to_f32(uint8_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x80u) << 24;
  const uint32_t mag = h & 0x7fu;
  if (mag >= 0x7cu) return bits_f32(sign | 0x7f800000u | ((mag & 0x3u) << 21));
  return bits_f32(sign | f32_bits(decode_magnitude<5, 2>(mag)));
}

}  // namespace soartune::kernels
