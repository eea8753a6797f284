#include "core/dtype.h"

#include <array>

namespace kvmem {
namespace {

struct Entry {
  DType type;
  DTypeInfo info;
};

// Sizes follow the block structs in kernels/quant_blocks.h (static_asserted there).
constexpr std::array<Entry, 16> kTable = {{
    {DType::kF32, {"F32", 1, 4}},
    {DType::kF16, {"F16", 1, 2}},
    {DType::kQ4_0, {"Q4_0", 32, 2 + 16}},
    {DType::kQ4_1, {"Q4_1", 32, 2 + 2 + 16}},
    {DType::kQ5_0, {"Q5_0", 32, 2 + 4 + 16}},
    {DType::kQ5_1, {"Q5_1", 32, 2 + 2 + 4 + 16}},
    {DType::kQ8_0, {"Q8_0", 32, 2 + 32}},
    {DType::kQ8_1, {"Q8_1", 32, 2 + 2 + 32}},
    {DType::kQ2_K, {"Q2_K", 256, 256 / 16 + 256 / 4 + 2 + 2}},
    {DType::kQ3_K, {"Q3_K", 256, 256 / 8 + 256 / 4 + 12 + 2}},
    {DType::kQ4_K, {"Q4_K", 256, 2 + 2 + 12 + 256 / 2}},
    {DType::kQ5_K, {"Q5_K", 256, 2 + 2 + 12 + 256 / 8 + 256 / 2}},
    {DType::kQ6_K, {"Q6_K", 256, 256 / 2 + 256 / 4 + 256 / 16 + 2}},
    {DType::kQ8_K, {"Q8_K", 256, 4 + 256 + 2 * 256 / 16}},
    {DType::kBF16, {"BF16", 1, 2}},
    {DType::kMxfp4, {"MXFP4", 32, 1 + 16}},
}};

}  // namespace

const DTypeInfo* GetDTypeInfo(uint32_t id) {
  for (const Entry& e : kTable) {
    if (static_cast<uint32_t>(e.type) == id) return &e.info;
  }
  return nullptr;
}

const char* DTypeName(DType t) {
  const DTypeInfo* info = GetDTypeInfo(t);
  return info ? info->name : "unknown";
}

bool RowBytes(DType t, int64_t n, size_t* out) {
  const DTypeInfo* info = GetDTypeInfo(t);
  if (info == nullptr || n < 0 || n % info->block_size != 0) return false;
  uint64_t blocks = static_cast<uint64_t>(n / info->block_size);
  uint64_t bytes;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info->type_size), &bytes)) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

}  // namespace kvmem
