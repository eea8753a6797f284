// Activations in the form the packed kernels read, and the AVX-512 VNNI kernels behind
// MatMul's packed path (kernels/packed_matrix.h). Internal to kernels/.
//
// A token's activations are first quantized by the source type's own activation quantizer (Q8_0,
// Q8_1 or Q8_K, exactly as the unpacked kernels do), then split into planes:
//   codes (n_in int8), ucodes (n_in uint8: codes + 128, the kS8 kernels' unsigned operand),
//   d16 (n_in / 16 floats: the scale of each 16 elements), s32 (n_in / 32 floats: the scale times
//   the sum of the codes of each 32 elements; Q8_1's own fp16 s).
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/packed_matrix.h"

namespace kvmem::kernels {

struct PackedActs {
  const uint8_t* base = nullptr;
  size_t stride = 0;  // bytes per token, a multiple of 64
  int64_t n_in = 0;

  const uint8_t* row(int64_t t) const { return base + static_cast<size_t>(t) * stride; }
  const int8_t* codes(int64_t t) const { return reinterpret_cast<const int8_t*>(row(t)); }
  const uint8_t* ucodes(int64_t t) const { return row(t) + n_in; }
  const float* d16(int64_t t) const { return reinterpret_cast<const float*>(row(t) + 2 * n_in); }
  const float* s32(int64_t t) const { return d16(t) + n_in / 16; }
};

// Bytes per token of PackedActs for rows of n_in elements (n_in a multiple of 32).
inline size_t PackedActStride(int64_t n_in) {
  const size_t bytes = static_cast<size_t>(2 * n_in + 4 * (n_in / 16 + n_in / 32));
  return (bytes + 63) / 64 * 64;
}

// Splits one token's activations, quantized in `act_type` (Q8_0, Q8_1 or Q8_K), into the planes
// at `out` (PackedActStride(n_in) bytes).
void SplitActivations(DType act_type, const void* quantized, int64_t n_in, uint8_t* out);

namespace avx512 {

// y[t * y_stride + r] for tokens [0, n_tokens) and the rows of groups [g0, g1).
void PackedMatMulGroups(const PackedMatrix& m, const PackedActs& acts, int64_t n_tokens, int64_t g0,
                        int64_t g1, float* y, int64_t y_stride);

}  // namespace avx512

}  // namespace kvmem::kernels
