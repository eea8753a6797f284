#include <cstring>

#include "core/fp16.h"
#include "kernels/packed_internal.h"
#include "kernels/quant_blocks.h"

namespace kvmem::kernels {
namespace {

// Writes codes, ucodes and the code sum of one 32-element block; returns the sum.
int PutCodes(const int8_t* qs, int8_t* codes, uint8_t* ucodes) {
  std::memcpy(codes, qs, 32);
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    ucodes[j] = static_cast<uint8_t>(qs[j]) ^ 0x80u;
    sum += qs[j];
  }
  return sum;
}

}  // namespace

void SplitActivations(DType act_type, const void* quantized, int64_t n_in, uint8_t* out) {
  auto* codes = reinterpret_cast<int8_t*>(out);
  uint8_t* ucodes = out + n_in;
  auto* d16 = reinterpret_cast<float*>(out + 2 * n_in);
  float* s32 = d16 + n_in / 16;
  switch (act_type) {
    case DType::kQ8_0:
      for (int64_t b = 0; b < n_in / 32; ++b) {
        const auto& blk = static_cast<const BlockQ8_0*>(quantized)[b];
        const int sum = PutCodes(blk.qs, codes + 32 * b, ucodes + 32 * b);
        const float d = F16ToF32(blk.d);
        d16[2 * b] = d16[2 * b + 1] = d;
        s32[b] = d * static_cast<float>(sum);  // exact: 11-bit d times a 12-bit sum
      }
      return;
    case DType::kQ8_1:
      for (int64_t b = 0; b < n_in / 32; ++b) {
        const auto& blk = static_cast<const BlockQ8_1*>(quantized)[b];
        PutCodes(blk.qs, codes + 32 * b, ucodes + 32 * b);
        d16[2 * b] = d16[2 * b + 1] = F16ToF32(blk.d);
        s32[b] = F16ToF32(blk.s);
      }
      return;
    case DType::kQ8_K:
      for (int64_t s = 0; s < n_in / kQK_K; ++s) {
        const auto& blk = static_cast<const BlockQ8_K*>(quantized)[s];
        for (int b = 0; b < kQK_K / 32; ++b) {
          const int64_t e = s * kQK_K + 32 * b;
          const int sum = PutCodes(blk.qs + 32 * b, codes + e, ucodes + e);
          d16[e / 16] = d16[e / 16 + 1] = blk.d;
          s32[e / 32] = blk.d * static_cast<float>(sum);
        }
      }
      return;
    default:
      std::memset(out, 0, PackedActStride(n_in));
      return;
  }
}

}  // namespace kvmem::kernels
