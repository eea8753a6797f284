// Overflow-checked integer arithmetic for parsing untrusted sizes and offsets.
#pragma once

#include <cstdint>

namespace kvmem {

// Each returns false (leaving *out unspecified) when the result does not fit.
inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
// Rounds up to a multiple of align (align > 0).
inline bool CheckedAlignUp(uint64_t v, uint64_t align, uint64_t* out) {
  uint64_t r = v % align;
  if (r == 0) {
    *out = v;
    return true;
  }
  return CheckedAdd(v, align - r, out);
}

}  // namespace kvmem
