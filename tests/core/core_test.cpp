#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace kvmem {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  KVMEM_ASSIGN_OR_RETURN(int h, Half(x));
  KVMEM_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(Status, PropagatesThroughMacros) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.status().ToString(), "InvalidArgument: odd: 3");
  EXPECT_EQ(r.status().WithContext("quarter").message(), "quarter: odd: 3");
}

// Every half code round-trips through float exactly (NaNs stay NaN).
TEST(Fp16, AllCodesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    EXPECT_EQ(F32ToF16(f), h) << h;
  }
}

// Rounding to nearest even checked against a value computed by hand: the midpoint between
// 1.0 (0x3c00) and the next half 1+2^-10 (0x3c01) rounds to the even code 0x3c00, while the
// midpoint between 0x3c01 and 0x3c02 rounds up to 0x3c02.
TEST(Fp16, RoundsHalfToEven) {
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
}

TEST(Bf16, RoundTripAndRounding) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = BF16ToF32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToBF16(f), b);
  }
  EXPECT_EQ(F32ToBF16(BitsToF32(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(F32ToBF16(BitsToF32(0x3f818000u)), 0x3f82);
}

TEST(CheckedMath, DetectsOverflow) {
  uint64_t out;
  EXPECT_FALSE(CheckedMul(1ull << 40, 1ull << 30, &out));
  EXPECT_TRUE(CheckedMul(1ull << 20, 1ull << 30, &out));
  EXPECT_EQ(out, 1ull << 50);
  EXPECT_FALSE(CheckedAdd(~0ull, 1, &out));
  EXPECT_TRUE(CheckedAlignUp(33, 32, &out));
  EXPECT_EQ(out, 64u);
  EXPECT_FALSE(CheckedAlignUp(~0ull - 3, 32, &out));
}

TEST(DType, RowBytes) {
  size_t b;
  EXPECT_TRUE(RowBytes(DType::kQ4_1, 576, &b));
  EXPECT_EQ(b, 576u / 32 * 20);
  EXPECT_FALSE(RowBytes(DType::kQ4_K, 100, &b));
  EXPECT_EQ(GetDTypeInfo(99u), nullptr);
}

TEST(ThreadPool, ParallelForCoversRangeOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, 3, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1);
    }
    std::atomic<int> runs{0};
    for (int rep = 0; rep < 200; ++rep) pool.Run([&](int) { runs.fetch_add(1); });
    EXPECT_EQ(runs.load(), 200 * threads);
  }
}

}  // namespace
}  // namespace kvmem
