// Unpacking of the K-quants' packed 6-bit sub-block scales and Q6_K codes, and Q8_K's rounding,
// shared by the scalar, AVX2 and packing code (internal to kernels/). Thread-safe: pure inline
// functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/quant_blocks.h"

namespace kvmem::kernels {

// Q4_K / Q5_K: eight 6-bit scales and eight 6-bit mins in 12 bytes (ggml's get_scale_min_k4).
// Bytes 0..3 hold scales 0..3 in their low 6 bits and the top 2 bits of scales 4..7; bytes 4..7
// the same for mins; bytes 8..11 the low nibbles of scales 4..7 (low) and mins 4..7 (high).
struct KScalesMins {
  uint8_t scales[8];
  uint8_t mins[8];
};

inline KScalesMins UnpackK4ScalesMins(const uint8_t s[12]) {
  // Four bytes at a time (little-endian words): byte k of each word is scale or min k (+4).
  uint32_t w[3];
  std::memcpy(w, s, 12);
  const uint32_t out[4] = {
      w[0] & 0x3f3f3f3fu,                                                // scales 0..3
      (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4),         // scales 4..7
      w[1] & 0x3f3f3f3fu,                                                // mins 0..3
      ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4),  // mins 4..7
  };
  KScalesMins sm;
  std::memcpy(sm.scales, out, 8);
  std::memcpy(sm.mins, out + 2, 8);
  return sm;
}

// Q3_K: sixteen 6-bit scales, stored biased by 32. Bytes 0..7 hold the low nibbles (scale j in
// byte j % 8, nibble j / 8); bytes 8..11 the top 2 bits (scale j in byte 8 + j % 4, bit pair
// j / 4).
inline void UnpackQ3KScales(const uint8_t s[12], int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = (s[j % 8] >> (4 * (j / 8))) & 0xF;
    const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

// ggml's nearest_int (round half to even; exact for |v| < 2^22) capped at 127, as
// quantize_row_q8_K_ref applies it to values in [-127, 127]. NaN (only reachable when the scale
// overflows for a subnormal block maximum) maps to 0 instead of undefined behaviour.
inline int NearestIntQ8K(float v) {
  if (v != v) return 0;
  return std::min(127, static_cast<int>(std::nearbyint(std::clamp(v, -128.0f, 127.0f))));
}

// The signed codes (-32..31) of a Q6_K block in element order. Each 128 half keeps 64 bytes of ql
// (byte l holds the low nibbles of elements l and l + 64, byte l + 32 those of l + 32 and l + 96)
// and 32 bytes of qh (byte l holds the top bit pairs of elements l, l + 32, l + 64, l + 96).
inline void DecodeQ6K(const BlockQ6_K& b, int8_t out[kQK_K]) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    int8_t* o = out + 128 * half;
    for (int l = 0; l < 32; ++l) {
      o[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      o[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      o[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      o[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

}  // namespace kvmem::kernels
