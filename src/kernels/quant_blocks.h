// Block layouts of ggml's quantized formats, byte for byte as GGUF stores them (ggml-common.h).
// Every struct is packed (alignment 1): a GGUF row of 18-, 20- or 22-byte blocks puts fp16 fields
// at odd addresses, and kernels read blocks in place, so no field may assume alignment. fp16
// fields are raw IEEE half bits (core/fp16.h converts them).
// Element order inside a block is what ggml's dequantize_row_* produce; each struct says it.
// Sizes are static_asserted here and checked against core/dtype.cpp's table in quant_test.cpp.
// Thread-safety: plain data.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace kvmem::kernels {

// x[j] = d * (nibble(j) - 8), nibble(j) = (qs[j % 16] >> (4 * (j / 16))) & 15: the low nibbles
// hold elements 0..15, the high nibbles 16..31.
struct [[gnu::packed]] BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};

// x[j] = d * nibble(j) + m, nibbles as in BlockQ4_0.
struct [[gnu::packed]] BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};

// x[j] = d * (nibble(j) | bit j of qh << 4) - 16 d; qh is a little-endian uint32.
struct [[gnu::packed]] BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};

// x[j] = d * (nibble(j) | bit j of qh << 4) + m.
struct [[gnu::packed]] BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};

// x[j] = d * qs[j].
struct [[gnu::packed]] BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};

// Activation format paired with Q4_1/Q5_1: x[j] = d * qs[j]; s = fp16(d * sum(qs)) carries the
// block sum so the weight's offset m contributes m * s without touching the quants.
struct [[gnu::packed]] BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_1];
};

// 16 groups of 16: x = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4), q 2 bits. Within each
// 128 half, qs[l] (l < 32) holds four elements at bit shifts 0, 2, 4, 6, 32 elements apart.
struct [[gnu::packed]] BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};

// 16 groups of 16: x = d * (scale6[g] - 32) * (q2 - (hmask bit ? 0 : 4)); 6-bit scales packed in
// 12 bytes (low nibbles in bytes 0..7, high 2 bits in bytes 8..11).
struct [[gnu::packed]] BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};

// 8 groups of 32: x = d * sc[g] * q - dmin * m[g], q 4 bits; sc and m are 6-bit values packed in
// `scales` (ggml's get_scale_min_k4). Each 32 bytes of qs hold two groups (low then high nibbles).
struct [[gnu::packed]] BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};

// As Q4_K with a fifth bit: element l of group g takes bit g of qh[l % 32].
struct [[gnu::packed]] BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};

// 16 groups of 16: x = d * scales[g] * (q6 - 32); q6 = 4 low bits from ql, 2 high bits from qh.
struct [[gnu::packed]] BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

// Activation format paired with the K-quants: x[j] = d * qs[j] (d is a float here); bsums[g] is
// the sum of qs over group g of 16, which the K-quant dot products use for their mins.
struct [[gnu::packed]] BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

// MXFP4 (OCP microscaling, E2M1 values with a shared E8M0 scale), as ggml stores it:
// x[j] = kMxfp4Values[nibble(j)] * 2^(e - 128), nibbles as in BlockQ4_0. The table is twice the
// E2M1 values (so it is integer) and the scale is halved to match (ggml's e8m0_to_fp32_half).
struct [[gnu::packed]] BlockMxfp4 {
  uint8_t e;
  uint8_t qs[kQKMxfp4 / 2];
};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static_assert(sizeof(BlockMxfp4) == 17);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(alignof(BlockQ8_K) == 1);

}  // namespace kvmem::kernels
