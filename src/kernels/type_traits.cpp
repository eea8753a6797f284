#include "kernels/type_traits.h"

#include <span>

#include "kernels/quant_internal.h"

namespace kvmem::kernels {
namespace {

// The reference table: every kernel here is the plain C++ of quant_scalar*.cpp.
constexpr TypeTraits kScalarTable[] = {
    {DType::kF32, scalar::ToFloatF32, scalar::FromFloatF32, scalar::VecDotF32, DType::kF32},
    {DType::kF16, scalar::ToFloatF16, scalar::FromFloatF16, scalar::VecDotF16, DType::kF16},
    {DType::kBF16, scalar::ToFloatBF16, scalar::FromFloatBF16, scalar::VecDotBF16, DType::kBF16},
    {DType::kQ4_0, scalar::ToFloatQ4_0, scalar::FromFloatQ4_0, scalar::VecDotQ4_0Q8_0,
     DType::kQ8_0},
    {DType::kQ4_1, scalar::ToFloatQ4_1, scalar::FromFloatQ4_1, scalar::VecDotQ4_1Q8_1,
     DType::kQ8_1},
    {DType::kQ5_0, scalar::ToFloatQ5_0, scalar::FromFloatQ5_0, scalar::VecDotQ5_0Q8_0,
     DType::kQ8_0},
    {DType::kQ5_1, scalar::ToFloatQ5_1, scalar::FromFloatQ5_1, scalar::VecDotQ5_1Q8_1,
     DType::kQ8_1},
    {DType::kQ8_0, scalar::ToFloatQ8_0, scalar::FromFloatQ8_0, scalar::VecDotQ8_0Q8_0,
     DType::kQ8_0},
    {DType::kQ8_1, scalar::ToFloatQ8_1, scalar::FromFloatQ8_1, nullptr, DType::kQ8_1},
    {DType::kQ2_K, scalar::ToFloatQ2_K, nullptr, scalar::VecDotQ2_KQ8_K, DType::kQ8_K},
    {DType::kQ3_K, scalar::ToFloatQ3_K, nullptr, scalar::VecDotQ3_KQ8_K, DType::kQ8_K},
    {DType::kQ4_K, scalar::ToFloatQ4_K, nullptr, scalar::VecDotQ4_KQ8_K, DType::kQ8_K},
    {DType::kQ5_K, scalar::ToFloatQ5_K, nullptr, scalar::VecDotQ5_KQ8_K, DType::kQ8_K},
    {DType::kQ6_K, scalar::ToFloatQ6_K, nullptr, scalar::VecDotQ6_KQ8_K, DType::kQ8_K},
    {DType::kQ8_K, scalar::ToFloatQ8_K, scalar::FromFloatQ8_K, nullptr, DType::kQ8_K},
    {DType::kMxfp4, scalar::ToFloatMxfp4, nullptr, scalar::VecDotMxfp4Q8_0, DType::kQ8_0},
};

#if defined(__x86_64__)
// AVX2 where a vector kernel exists, the scalar kernel otherwise. Same types and vec_dot_types
// as the reference table (checked by quant_test.cpp).
constexpr TypeTraits kAvx2Table[] = {
    {DType::kF32, scalar::ToFloatF32, scalar::FromFloatF32, avx2::VecDotF32, DType::kF32},
    {DType::kF16, avx2::ToFloatF16, avx2::FromFloatF16, avx2::VecDotF16, DType::kF16},
    {DType::kBF16, avx2::ToFloatBF16, scalar::FromFloatBF16, avx2::VecDotBF16, DType::kBF16},
    {DType::kQ4_0, avx2::ToFloatQ4_0, scalar::FromFloatQ4_0, avx2::VecDotQ4_0Q8_0, DType::kQ8_0},
    {DType::kQ4_1, avx2::ToFloatQ4_1, scalar::FromFloatQ4_1, avx2::VecDotQ4_1Q8_1, DType::kQ8_1},
    {DType::kQ5_0, scalar::ToFloatQ5_0, scalar::FromFloatQ5_0, avx2::VecDotQ5_0Q8_0, DType::kQ8_0},
    {DType::kQ5_1, scalar::ToFloatQ5_1, scalar::FromFloatQ5_1, avx2::VecDotQ5_1Q8_1, DType::kQ8_1},
    {DType::kQ8_0, avx2::ToFloatQ8_0, avx2::FromFloatQ8_0, avx2::VecDotQ8_0Q8_0, DType::kQ8_0},
    {DType::kQ8_1, scalar::ToFloatQ8_1, avx2::FromFloatQ8_1, nullptr, DType::kQ8_1},
    {DType::kQ2_K, scalar::ToFloatQ2_K, nullptr, scalar::VecDotQ2_KQ8_K, DType::kQ8_K},
    {DType::kQ3_K, scalar::ToFloatQ3_K, nullptr, scalar::VecDotQ3_KQ8_K, DType::kQ8_K},
    {DType::kQ4_K, scalar::ToFloatQ4_K, nullptr, avx2::VecDotQ4_KQ8_K, DType::kQ8_K},
    {DType::kQ5_K, scalar::ToFloatQ5_K, nullptr, avx2::VecDotQ5_KQ8_K, DType::kQ8_K},
    {DType::kQ6_K, scalar::ToFloatQ6_K, nullptr, avx2::VecDotQ6_KQ8_K, DType::kQ8_K},
    {DType::kQ8_K, scalar::ToFloatQ8_K, avx2::FromFloatQ8_K, nullptr, DType::kQ8_K},
    {DType::kMxfp4, avx2::ToFloatMxfp4, nullptr, avx2::VecDotMxfp4Q8_0, DType::kQ8_0},
};
#endif

const TypeTraits* Find(std::span<const TypeTraits> table, DType type) {
  for (const TypeTraits& t : table) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

}  // namespace

const TypeTraits* GetTypeTraits(DType type, Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return Find(kScalarTable, type);
    case Isa::kAvx2:
#if defined(__x86_64__)
      if (CpuSupports(Isa::kAvx2)) return Find(kAvx2Table, type);
#endif
      return nullptr;
  }
  return nullptr;
}

}  // namespace kvmem::kernels
