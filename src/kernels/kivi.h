// KIVI's key format (Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV
// Cache"), at 4 bits: keys have outlier channels, so they are quantized per channel over a group
// of kKiviGroupRows consecutive rows (tokens) rather than per token. Per channel c of a group:
//   k[r][c] = scale[c] * code[r][c] + min[c],  code in 0..15,
// scale and min f16, computed with f32 arithmetic as one multiply then one add.
//
// Layout of one group of a head with head_dim channels (KiviGroupBytes):
//   scale[head_dim] f16 | min[head_dim] f16 | codes: kKiviGroupRows rows of head_dim / 2 bytes.
// A row's codes are head_dim / 32 chunks of 16 bytes packed as ggml's Q4_1 packs a block: byte j
// of chunk b holds channel 32b + j in its low nibble and channel 32b + 16 + j in its high one, so
// a chunk meets a 32-element block of 8-bit query values as ggml's Q4_1 x Q8_1 dot does.
//
// head_dim is a multiple of 32. Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvmem::kernels {

inline constexpr int kKiviGroupRows = 32;

size_t KiviGroupBytes(int head_dim);
// Byte offsets inside a group.
inline constexpr size_t KiviMinsOffset(int head_dim) { return 2 * static_cast<size_t>(head_dim); }
inline constexpr size_t KiviCodesOffset(int head_dim) { return 4 * static_cast<size_t>(head_dim); }

// x: (kKiviGroupRows, head_dim) f32 rows -> one group. Codes are rounded to nearest against the
// stored (f16-rounded) scale and min, so for values within f16 range the error is half a step
// plus the f16 roundings of scale and min (the budget tests/kv checks):
//   |x - x'| <= 0.51 scale + 2^-10 max(|min|, |max|) + 2^-20.
void QuantizeKiviGroup(const float* x, int head_dim, void* group);
// One group -> (kKiviGroupRows, head_dim) f32 rows.
void DequantizeKiviGroup(const void* group, int head_dim, float* x);
// Row `row` (0..kKiviGroupRows-1) of one group -> (head_dim) f32.
void DequantizeKiviRow(const void* group, int head_dim, int row, float* x);

}  // namespace kvmem::kernels
