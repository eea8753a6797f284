// One table from a tensor type to the functions that handle it (ggml's type_traits idea):
// dequantize a row, quantize a row (for activation / KV formats), and the dot product of a row of
// this type with a row of its `vec_dot_type` (the format activations are converted to first, as
// ggml does: Q4_0/Q5_0/Q8_0 -> Q8_0, Q4_1 -> Q8_1, K-quants -> Q8_K, F16 -> F16, BF16 -> BF16).
// A table exists per ISA; the scalar one is the reference every other is tested against.
// Thread-safe: tables are immutable.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu_features.h"

namespace kvmem::kernels {

// n is a multiple of the type's block size in all three.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// Returns sum_i x[i] * y[i] for x in `type`, y in `vec_dot_type`.
using VecDotFn = float (*)(int64_t n, const void* x, const void* y);

struct TypeTraits {
  DType type;
  ToFloatFn to_float = nullptr;
  FromFloatFn from_float = nullptr;  // nullptr where kvmem never quantizes to this type
  VecDotFn vec_dot = nullptr;
  DType vec_dot_type = DType::kF32;
};

// nullptr if kvmem has no kernels for `type`, or if this build or CPU cannot run `isa` (so a
// test asking for the AVX2 table on a machine without AVX2 learns it rather than getting scalar).
const TypeTraits* GetTypeTraits(DType type, Isa isa);
inline const TypeTraits* GetTypeTraits(DType type) { return GetTypeTraits(type, ActiveIsa()); }

}  // namespace kvmem::kernels
