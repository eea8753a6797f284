// IEEE half and bfloat16 conversions, bit-exact with the hardware (F16C) conversions and with
// ggml's (round to nearest even, NaN kept NaN). Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvmem {

inline float BitsToF32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t F32ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Half -> float, exact for every code including subnormals, inf and NaN.
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToF32(sign | 0x7f800000u | (mant << 13));
  return BitsToF32(sign | ((exp + 112) << 23) | (mant << 13));
}

// Float -> half with round-to-nearest-even, overflow to inf, NaN to a quiet NaN.
inline uint16_t F32ToF16(float f) {
  const uint32_t x = F32ToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65536
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // Scale so the half subnormal unit (2^-24) lands on the float's integer grid, then round.
    const float scaled = BitsToF32(abs) * 16777216.0f;  // exact: multiply by 2^24
    // nearbyint with default rounding mode is round-half-even.
    const uint32_t m = static_cast<uint32_t>(__builtin_nearbyintf(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  // Normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even.
  uint32_t v = abs - (112u << 23);
  const uint32_t round_bit = 1u << 12;
  const uint32_t lsb = (v >> 13) & 1u;
  v += (round_bit - 1) + lsb;
  return static_cast<uint16_t>(sign | (v >> 13));
}

inline float BF16ToF32(uint16_t b) { return BitsToF32(static_cast<uint32_t>(b) << 16); }

// Round to nearest even; NaN stays NaN (quiet), as ggml_compute_fp32_to_bf16.
inline uint16_t F32ToBF16(float f) {
  uint32_t u = F32ToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace kvmem
