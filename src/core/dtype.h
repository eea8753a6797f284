// Tensor element types, numbered as ggml/GGUF number them (the on-disk ids), with the block
// geometry every layer needs to size and bounds-check tensors. Kernels attach behaviour to these
// ids in kernels/type_traits.h; this header is pure data. Thread-safe (constants only).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvmem {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
  kMxfp4 = 39,  // OCP microscaling FP4 (GPT-OSS's expert weights)
};

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQK_K = 256;
inline constexpr int kQKMxfp4 = 32;

struct DTypeInfo {
  const char* name;
  int64_t block_size;  // elements per block
  size_t type_size;    // bytes per block
};

// nullptr for ids kvmem does not know (the caller reports them as Unsupported).
const DTypeInfo* GetDTypeInfo(uint32_t id);
inline const DTypeInfo* GetDTypeInfo(DType t) { return GetDTypeInfo(static_cast<uint32_t>(t)); }
const char* DTypeName(DType t);

// Bytes of a row of n elements; false if n is not a multiple of the block size or overflows.
bool RowBytes(DType t, int64_t n, size_t* out);

}  // namespace kvmem
