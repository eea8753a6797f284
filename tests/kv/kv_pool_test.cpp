// KvPool in every KV format: formats' names and sizes, write / read round trips within each
// format's named error budget, the kivi4 staging -> group transition and rewrites after a
// truncation, attention through pool spans, and re-positioning (rotating stored keys equals
// writing keys computed at the new positions, and +d then -d returns to the start).
#include "kv/kv_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/ops.h"
#include "kv/kv_format.h"

namespace kvmem::kv {
namespace {

constexpr KvFormat kAllFormats[] = {KvFormat::kF16, KvFormat::kQ8_0, KvFormat::kQ4_0,
                                    KvFormat::kKivi4};

// ---- Named error budgets: the largest |read - written| a format allows for one value ----------
// `lo`, `hi`, `amax` describe the values quantized together with it: its 32-value ggml block of
// the row, or for kivi4 K its channel over the group's 32 rows.

// f16: round to nearest, 11 significant bits (2^-25 in the subnormal range).
double F16Budget(double x) { return std::ldexp(std::fabs(x), -11) + std::ldexp(1.0, -25); }
// Q8_0: half a step of amax / 127, plus the f16 rounding of the block scale times 127 codes.
double Q8_0Budget(double amax) { return (0.5 + 1.0 / 16) * amax / 127 + std::ldexp(1.0, -18); }
// Q4_0: a full step of amax / 8 (ggml's scale maps the largest magnitude to -8, so its mirror
// value clamps at +7), plus the f16 rounding of the scale times 8 codes.
double Q4_0Budget(double amax) { return amax / 8 * (1 + 1.0 / 256) + std::ldexp(1.0, -18); }
// Q4_1 (kivi4 V): half a step of (hi - lo) / 15, plus the f16 roundings of scale and min.
double Q4_1Budget(double lo, double hi) {
  return 0.51 * (hi - lo) / 15 + std::ldexp(std::max(std::fabs(lo), std::fabs(hi)), -10) +
         std::ldexp(1.0, -20);
}
// kivi4 K in whole groups: Q4_1's budget per channel, over values first staged in f16.
double Kivi4KBudget(double lo, double hi) {
  return Q4_1Budget(lo, hi) + std::ldexp(std::max(std::fabs(lo), std::fabs(hi)), -11);
}

// Per-value budgets of rows (n_rows, head_dim) of one head written in one format. For kivi4 K,
// rows [0, quantized_rows) are in whole groups (row r in group r / 32), later rows staged in f16.
std::vector<double> Budgets(KvFormat f, bool key, const std::vector<float>& x, int n_rows, int hd,
                            int quantized_rows) {
  std::vector<double> b(x.size());
  for (int r = 0; r < n_rows; ++r) {
    for (int c = 0; c < hd; ++c) {
      const size_t i = static_cast<size_t>(r) * hd + c;
      double lo = INFINITY, hi = -INFINITY;
      if (key && f == KvFormat::kKivi4) {
        if (r >= quantized_rows) {
          b[i] = F16Budget(x[i]);
          continue;
        }
        for (int rr = r / 32 * 32; rr < r / 32 * 32 + 32; ++rr) {
          lo = std::min<double>(lo, x[static_cast<size_t>(rr) * hd + c]);
          hi = std::max<double>(hi, x[static_cast<size_t>(rr) * hd + c]);
        }
        b[i] = Kivi4KBudget(lo, hi);
        continue;
      }
      for (int cc = c / 32 * 32; cc < c / 32 * 32 + 32; ++cc) {
        lo = std::min<double>(lo, x[static_cast<size_t>(r) * hd + cc]);
        hi = std::max<double>(hi, x[static_cast<size_t>(r) * hd + cc]);
      }
      const double amax = std::max(std::fabs(lo), std::fabs(hi));
      switch (f) {
        case KvFormat::kF16:
          b[i] = F16Budget(x[i]);
          break;
        case KvFormat::kQ8_0:
          b[i] = Q8_0Budget(amax);
          break;
        case KvFormat::kQ4_0:
          b[i] = Q4_0Budget(amax);
          break;
        case KvFormat::kKivi4:  // V
          b[i] = Q4_1Budget(lo, hi);
          break;
      }
    }
  }
  return b;
}

KvGeometry Geometry(int hd = 64, int block_rows = 64) {
  return {/*n_layers=*/2, /*n_kv_heads=*/2, hd, hd, block_rows};
}

// Keys with outlier channels (KIVI's motivation) and plain values.
std::vector<float> RandomRows(std::mt19937* rng, int n, int width, bool outliers) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n) * width);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = dist(*rng);
    if (outliers && i % width % 13 == 3) x[i] = 8.0f + 2.0f * x[i];
  }
  return x;
}

// Rows of one (layer, head) out of per-token (n, n_kv_heads, hd) data.
std::vector<float> HeadRows(const std::vector<float>& tokens, int n, int heads, int hd, int h) {
  std::vector<float> out(static_cast<size_t>(n) * hd);
  for (int t = 0; t < n; ++t) {
    std::copy_n(&tokens[(static_cast<size_t>(t) * heads + h) * hd], hd,
                &out[static_cast<size_t>(t) * hd]);
  }
  return out;
}

struct Written {
  std::vector<std::vector<float>> k, v;  // per layer: (n, n_kv_heads, hd) tokens
};

// Writes n rows of one block in every layer, in order.
Written WriteRows(KvPool* pool, int32_t block, int n, std::mt19937* rng) {
  const KvGeometry& g = pool->geometry();
  Written w;
  for (int l = 0; l < g.n_layers; ++l) {
    w.k.push_back(RandomRows(rng, n, g.n_kv_heads * g.head_dim_k, true));
    w.v.push_back(RandomRows(rng, n, g.n_kv_heads * g.head_dim_v, false));
  }
  for (int r = 0; r < n; ++r) {
    for (int l = 0; l < g.n_layers; ++l) {
      const size_t ko = static_cast<size_t>(r) * g.n_kv_heads * g.head_dim_k;
      const size_t vo = static_cast<size_t>(r) * g.n_kv_heads * g.head_dim_v;
      pool->WriteToken({block, r}, l, &w.k[l][ko], &w.v[l][vo]);
    }
  }
  return w;
}

// Reads rows [0, n) of a block and layer: per head, (n, hd) keys and values.
void ReadRows(const KvPool& pool, int32_t block, int layer, int n, std::vector<float>* k,
              std::vector<float>* v) {
  const KvGeometry& g = pool.geometry();
  k->resize(static_cast<size_t>(n) * g.n_kv_heads * g.head_dim_k);
  v->resize(static_cast<size_t>(n) * g.n_kv_heads * g.head_dim_v);
  for (int r = 0; r < n; ++r) {
    pool.ReadToken({block, r}, layer, &(*k)[static_cast<size_t>(r) * g.n_kv_heads * g.head_dim_k],
                   &(*v)[static_cast<size_t>(r) * g.n_kv_heads * g.head_dim_v]);
  }
}

// Checks that every read value of `n` rows of (block, layer) is within the budget of the format.
void ExpectWithinBudget(const KvPool& pool, int32_t block, int layer, int n, const Written& w,
                        int quantized_rows, const std::string& what, bool check_k = true) {
  const KvGeometry& g = pool.geometry();
  std::vector<float> k, v;
  ReadRows(pool, block, layer, n, &k, &v);
  for (int h = 0; h < g.n_kv_heads; ++h) {
    for (bool key : {true, false}) {
      if (key && !check_k) continue;
      const int hd = key ? g.head_dim_k : g.head_dim_v;
      const KvFormat f = key ? pool.formats().k : pool.formats().v;
      const std::vector<float> in = HeadRows(key ? w.k[layer] : w.v[layer], n, g.n_kv_heads, hd, h);
      const std::vector<float> out = HeadRows(key ? k : v, n, g.n_kv_heads, hd, h);
      const std::vector<double> budget = Budgets(f, key, in, n, hd, quantized_rows);
      for (size_t i = 0; i < in.size(); ++i) {
        ASSERT_NEAR(out[i], in[i], budget[i])
            << what << (key ? " K " : " V ") << KvFormatName(f) << " head " << h << " row "
            << i / hd << " dim " << i % hd;
      }
    }
  }
}

TEST(KvFormat, NamesParseAndRoundTrip) {
  for (KvFormat f : kAllFormats) {
    auto parsed = ParseKvFormat(KvFormatName(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_EQ(KvFormatNames(), "f16, q8_0, q4_0, kivi4");
  auto bad = ParseKvFormat("q4_k");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "unknown KV cache format 'q4_k' (valid: f16, q8_0, q4_0, kivi4)");
  EXPECT_FALSE(ParseKvFormat("").ok());
  EXPECT_FALSE(ParseKvFormat("F16").ok());
}

TEST(KvFormat, HeadSizeChecks) {
  EXPECT_TRUE(CheckKvFormats({}, 40, 40).ok());
  EXPECT_TRUE(CheckKvFormats({KvFormat::kKivi4, KvFormat::kQ8_0}, 128, 128).ok());
  const Status s = CheckKvFormats({KvFormat::kQ8_0, KvFormat::kF16}, 40, 40);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("q8_0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("40"), std::string::npos) << s.message();
  EXPECT_FALSE(CheckKvFormats({KvFormat::kF16, KvFormat::kKivi4}, 64, 48).ok());
  EXPECT_FALSE(CheckKvFormats({KvFormat::kQ4_0, KvFormat::kQ4_0}, 64, 128).ok());
}

// Bytes per token, computed by hand for head_dim 64: f16 2 x 64; q8_0 2 blocks of (2 + 32);
// q4_0 2 blocks of (2 + 16); kivi4 K 32 bytes of codes + f16 scale and min per channel shared
// by 32 rows (2 * 2 * 64 / 32 = 8); kivi4 V (q4_1) 2 blocks of (2 + 2 + 16).
TEST(KvFormat, BytesPerToken) {
  struct Case {
    KvFormat f;
    size_t k, v;
  };
  for (const Case& c : {Case{KvFormat::kF16, 128, 128}, Case{KvFormat::kQ8_0, 68, 68},
                        Case{KvFormat::kQ4_0, 36, 36}, Case{KvFormat::kKivi4, 40, 40}}) {
    EXPECT_EQ(KvBytesPerTokenLayer({c.f, c.f}, 1, 64, 64), c.k + c.v) << KvFormatName(c.f);
    EXPECT_EQ(KvBytesPerTokenLayer({c.f, KvFormat::kF16}, 1, 64, 64), c.k + 128);
    EXPECT_EQ(KvBytesPerTokenLayer({KvFormat::kF16, c.f}, 1, 64, 64), 128 + c.v);
    // SmolLM2-135M: 30 layers, 3 KV heads of 64.
    const KvPool pool({30, 3, 64, 64, 256}, 1, {c.f, c.f});
    EXPECT_EQ(pool.bytes_per_token(), 30 * 3 * (c.k + c.v)) << KvFormatName(c.f);
    EXPECT_EQ(pool.bytes_per_block(), 256 * pool.bytes_per_token()) << KvFormatName(c.f);
  }
  // head_dim 128: kivi4 K 64 + 16.
  EXPECT_EQ(KvBytesPerTokenLayer({KvFormat::kKivi4, KvFormat::kKivi4}, 2, 128, 128),
            2u * (80 + 80));
}

class KvPoolFormatTest : public testing::TestWithParam<std::tuple<KvFormat, KvFormat>> {
 protected:
  KvFormats formats() const { return {std::get<0>(GetParam()), std::get<1>(GetParam())}; }
  bool kivi() const { return formats().k == KvFormat::kKivi4; }
  // Rows of a block that sit in whole kivi4 groups after n rows are written.
  int Quantized(int n) const { return kivi() ? n / 32 * 32 : n; }
};

TEST_P(KvPoolFormatTest, WriteReadRoundTrip) {
  std::mt19937 rng(1);
  for (int hd : {64, 128}) {
    KvPool pool(Geometry(hd), 4, formats());
    const int32_t full = *pool.Allocate(), partial = *pool.Allocate();
    const Written wf = WriteRows(&pool, full, 64, &rng);
    const Written wp = WriteRows(&pool, partial, 45, &rng);  // one group + 13 staged rows
    for (int l = 0; l < 2; ++l) {
      ExpectWithinBudget(pool, full, l, 64, wf, Quantized(64), "full block");
      ExpectWithinBudget(pool, partial, l, 45, wp, Quantized(45), "45 rows");
      if (HasFatalFailure()) return;
    }
  }
}

// The raw f16 accessors of an f16 pool see the rows as written, rounded to f16.
TEST(KvPoolF16, RawRowsAreTheWrittenRows) {
  std::mt19937 rng(2);
  KvPool pool(Geometry(), 1);
  const int32_t b = *pool.Allocate();
  const Written w = WriteRows(&pool, b, 10, &rng);
  for (int r = 0; r < 10; ++r) {
    for (int i = 0; i < 2 * 64; ++i) {
      const int h = i / 64, d = i % 64;
      EXPECT_EQ(pool.K(b, 1, h)[r * 64 + d], F32ToF16(w.k[1][r * 128 + i]));
      EXPECT_EQ(pool.V(b, 1, h)[r * 64 + d], F32ToF16(w.v[1][r * 128 + i]));
    }
  }
}

// A sequence truncated into a block (DropRows) and re-appended rewrites rows from the cut on:
// the rows before the cut keep their values (a kivi4 group cut open returns to staging through
// f16 and is quantized again: the old and the new budget plus f16), the rows after it are the
// new ones.
TEST_P(KvPoolFormatTest, RewriteAfterTruncation) {
  std::mt19937 rng(3);
  KvPool pool(Geometry(), 2, formats());
  const KvGeometry& g = pool.geometry();
  const int32_t b = *pool.Allocate();
  Written expect = WriteRows(&pool, b, 50, &rng);
  int expect_rows = 50;
  for (int cut : {40, 20}) {
    Written merged = expect;
    for (int l = 0; l < g.n_layers; ++l) {
      const std::vector<float> k = RandomRows(&rng, 64, 128, true),
                               v = RandomRows(&rng, 64, 128, false);
      merged.k[l].resize(64 * 128);
      merged.v[l].resize(64 * 128);
      std::copy(k.begin() + cut * 128, k.end(), merged.k[l].begin() + cut * 128);
      std::copy(v.begin() + cut * 128, v.end(), merged.v[l].begin() + cut * 128);
    }
    pool.DropRows(b, cut);
    for (int l = 0; l < g.n_layers; ++l) EXPECT_EQ(pool.written_rows(b, l), cut);
    if (kivi()) {
      const kernels::KvSpan s = pool.Span(b, 1, 0, 0, cut);
      EXPECT_EQ(s.k_quantized_rows, cut / 32 * 32) << "a group cut open is staged again";
    }
    for (int r = cut; r < 64; ++r) {
      for (int l = 0; l < g.n_layers; ++l) {
        pool.WriteToken({b, r}, l, &merged.k[l][static_cast<size_t>(r) * 128],
                        &merged.v[l][static_cast<size_t>(r) * 128]);
      }
    }
    for (int l = 0; l < g.n_layers; ++l) {
      // Per-row formats: every row within one budget. kivi4 K: below.
      ExpectWithinBudget(pool, b, l, 64, merged, 64, "after cut " + std::to_string(cut), !kivi());
      if (!kivi()) continue;
      std::vector<float> k, v;
      ReadRows(pool, b, l, 64, &k, &v);
      for (int h = 0; h < 2; ++h) {
        const std::vector<float> in = HeadRows(merged.k[l], 64, 2, 64, h);
        const std::vector<float> prev = HeadRows(expect.k[l], expect_rows, 2, 64, h);
        const std::vector<float> out = HeadRows(k, 64, 2, 64, h);
        const std::vector<double> bud = Budgets(formats().k, true, in, 64, 64, 64);
        const std::vector<double> bud_prev =
            Budgets(formats().k, true, prev, expect_rows, 64, Quantized(expect_rows));
        for (size_t i = 0; i < in.size(); ++i) {
          const double tol =
              static_cast<int>(i / 64) < cut ? bud[i] + bud_prev[i] + F16Budget(in[i]) : bud[i];
          ASSERT_NEAR(out[i], in[i], tol) << "cut " << cut << " layer " << l << " row " << i / 64;
        }
      }
    }
    if (HasFatalFailure()) return;
    expect = merged;
    expect_rows = 64;
  }
}

// Recomputation writes rows in place, anywhere in a block: the rows around keep their place and
// values (kivi4: the other rows of a rewritten whole group are requantized once, one more
// budget; staged rows are untouched f16).
TEST_P(KvPoolFormatTest, OverwriteInPlace) {
  std::mt19937 rng(8);
  KvPool pool(Geometry(), 1, formats());
  const KvGeometry& g = pool.geometry();
  const int32_t b = *pool.Allocate();
  const Written before = WriteRows(&pool, b, 50, &rng);
  Written after = before;
  for (int r : {10, 40, 3}) {
    for (int l = 0; l < g.n_layers; ++l) {
      const std::vector<float> k = RandomRows(&rng, 1, 128, true),
                               v = RandomRows(&rng, 1, 128, false);
      std::copy(k.begin(), k.end(), after.k[l].begin() + r * 128);
      std::copy(v.begin(), v.end(), after.v[l].begin() + r * 128);
      pool.WriteToken({b, r}, l, k.data(), v.data());
    }
  }
  for (int l = 0; l < g.n_layers; ++l) {
    EXPECT_EQ(pool.written_rows(b, l), 50);
    ExpectWithinBudget(pool, b, l, 50, after, Quantized(50), "overwritten", !kivi());
    if (!kivi()) continue;
    std::vector<float> k, v;
    ReadRows(pool, b, l, 50, &k, &v);
    for (int h = 0; h < 2; ++h) {
      const std::vector<float> in = HeadRows(after.k[l], 50, 2, 64, h);
      const std::vector<float> prev = HeadRows(before.k[l], 50, 2, 64, h);
      const std::vector<float> out = HeadRows(k, 50, 2, 64, h);
      const std::vector<double> bud = Budgets(formats().k, true, in, 50, 64, 32);
      const std::vector<double> bud_prev = Budgets(formats().k, true, prev, 50, 64, 32);
      for (size_t i = 0; i < in.size(); ++i) {
        const int r = static_cast<int>(i / 64);
        // Group 0 was requantized twice (rows 10 and 3) after its first quantization.
        const double tol = r < 32 ? bud[i] + 2 * bud_prev[i] + F16Budget(in[i]) : bud[i];
        ASSERT_NEAR(out[i], in[i], tol) << "layer " << l << " row " << r;
      }
    }
  }
}

// kivi4: the first 31 rows of a group are staged in f16 (read back exactly as f16), the 32nd
// write quantizes the group; spans switch from staging to the group at that moment; a block's
// staging is released once every layer's rows are all in whole groups.
TEST(KvPoolKivi, StagingThenGroup) {
  std::mt19937 rng(4);
  KvPool pool(Geometry(), 2, {KvFormat::kKivi4, KvFormat::kKivi4});
  const int32_t b = *pool.Allocate();
  EXPECT_EQ(pool.staging_bytes(), 0u);
  const KvGeometry& g = pool.geometry();
  std::vector<float> k = RandomRows(&rng, 64, 128, true), v = RandomRows(&rng, 64, 128, false);
  std::vector<float> rk(128), rv(128);
  for (int r = 0; r < 64; ++r) {
    for (int l = 0; l < g.n_layers; ++l) pool.WriteToken({b, r}, l, &k[r * 128], &v[r * 128]);
    if (r < 63) {
      EXPECT_GT(pool.staging_bytes(), 0u) << r;
    }
    if (r == 30 || r == 62) {
      const int g0 = r / 32 * 32;
      for (int rr = g0; rr <= r; ++rr) {
        pool.ReadToken({b, rr}, 1, rk.data(), rv.data());
        for (int i = 0; i < 128; ++i) {
          ASSERT_EQ(rk[i], F16ToF32(F32ToF16(k[rr * 128 + i]))) << "staged row " << rr;
        }
      }
      const kernels::KvSpan s = pool.Span(b, 1, 1, g0, r - g0 + 1);
      EXPECT_EQ(s.k_quantized_rows, 0);
      EXPECT_NE(s.k_staging, nullptr);
      const kernels::KvSpan whole = pool.Span(b, 1, 1, 0, r + 1);
      EXPECT_EQ(whole.k_quantized_rows, g0);
      EXPECT_EQ(whole.k_group_row, 0);
    }
    if (r == 31) {
      int changed = 0;
      for (int rr = 0; rr < 32; ++rr) {
        pool.ReadToken({b, rr}, 1, rk.data(), rv.data());
        for (int i = 0; i < 128; ++i) changed += rk[i] != F16ToF32(F32ToF16(k[rr * 128 + i]));
      }
      EXPECT_GT(changed, 32 * 128 / 2) << "the group should now be 4-bit";
      const kernels::KvSpan s = pool.Span(b, 0, 0, 5, 27);
      EXPECT_EQ(s.k_quantized_rows, 27);
      EXPECT_EQ(s.k_group_row, 5);
      EXPECT_EQ(s.k_staging, nullptr);
    }
  }
  // 64 rows in both layers: two whole groups each, staging released.
  EXPECT_EQ(pool.staging_bytes(), 0u);
  const kernels::KvSpan s = pool.Span(b, 0, 0, 40, 24);
  EXPECT_EQ(s.k_group_row, 8);
  EXPECT_EQ(s.k_quantized_rows, 24);
  pool.Free(b);
  EXPECT_EQ(pool.staging_bytes(), 0u);
}

// Blocks whose row count is not a multiple of 32 keep their last rows staged for good.
TEST(KvPoolKivi, BlockRowsNotMultipleOfGroup) {
  std::mt19937 rng(5);
  KvPool pool(Geometry(64, 40), 1, {KvFormat::kKivi4, KvFormat::kF16});
  const int32_t b = *pool.Allocate();
  const Written w = WriteRows(&pool, b, 40, &rng);
  for (int l = 0; l < 2; ++l) ExpectWithinBudget(pool, b, l, 40, w, 32, "40-row block");
  EXPECT_GT(pool.staging_bytes(), 0u);
  const kernels::KvSpan s = pool.Span(b, 0, 1, 30, 10);
  EXPECT_EQ(s.k_quantized_rows, 2);
  EXPECT_NE(s.k_staging, nullptr);
}

// Attention through pool spans (several blocks, spans starting inside kivi4 groups, staged
// rows, a span's prefix) against a double softmax over the rows read back. The query has one
// non-zero channel per 32, valued so that its 8-bit quantization (Q8_0 for q8_0 / q4_0 K, q *
// scale per group for kivi4) is exact up to float rounding: the only error left is rounding,
// so a misplaced row shows.
TEST_P(KvPoolFormatTest, AttendThroughSpans) {
  std::mt19937 rng(6);
  const int hd = 64;
  KvPool pool(Geometry(hd), 4, formats());
  std::vector<int32_t> blocks;
  std::vector<Written> written;
  for (int n : {64, 64, 45}) {
    blocks.push_back(*pool.Allocate());
    written.push_back(WriteRows(&pool, blocks.back(), n, &rng));
  }
  std::vector<float> q(hd, 0.0f);
  q[3] = 127.0f / 64;
  q[40] = -127.0f / 32;
  const float scale = 0.125f;
  struct Piece {
    int block, first, n;
  };
  const std::vector<Piece> pieces = {{0, 0, 64}, {1, 10, 40}, {2, 5, 33}, {2, 38, 7}, {1, 63, 1}};
  for (int layer = 0; layer < 2; ++layer) {
    for (int h = 0; h < 2; ++h) {
      for (int cut : {-1, 20, 30}) {  // the third span read whole or as a prefix
        std::vector<kernels::KvSpan> spans;
        std::vector<std::vector<float>> kr, vr;
        for (size_t p = 0; p < pieces.size(); ++p) {
          spans.push_back(
              pool.Span(blocks[pieces[p].block], layer, h, pieces[p].first, pieces[p].n));
          int n = pieces[p].n;
          if (p == 2 && cut >= 0) n = spans.back().n_rows = cut;
          for (int r = pieces[p].first; r < pieces[p].first + n; ++r) {
            std::vector<float> k(2 * hd), v(2 * hd);
            pool.ReadToken({blocks[pieces[p].block], r}, layer, k.data(), v.data());
            kr.emplace_back(k.begin() + h * hd, k.begin() + (h + 1) * hd);
            vr.emplace_back(v.begin() + h * hd, v.begin() + (h + 1) * hd);
          }
        }
        std::vector<double> s(kr.size());
        double mx = -INFINITY, sum = 0;
        for (size_t j = 0; j < kr.size(); ++j) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double{q[d]} * kr[j][d];
          s[j] = scale * dot;
          mx = std::max(mx, s[j]);
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        std::vector<double> ref(hd, 0.0);
        for (size_t j = 0; j < kr.size(); ++j) {
          for (int d = 0; d < hd; ++d) ref[d] += s[j] / sum * vr[j][d];
        }
        std::vector<float> out(hd), w(kr.size());
        pool.Attend(q.data(), spans.data(), static_cast<int>(spans.size()), scale, out.data());
        pool.AttentionWeights(q.data(), spans.data(), static_cast<int>(spans.size()), scale,
                              w.data());
        const std::string what = "layer " + std::to_string(layer) + " head " + std::to_string(h) +
                                 " cut " + std::to_string(cut);
        for (size_t j = 0; j < kr.size(); ++j) {
          ASSERT_NEAR(w[j], s[j] / sum, 1e-5 * s[j] / sum + 1e-12) << what << " row " << j;
        }
        for (int d = 0; d < hd; ++d) ASSERT_NEAR(out[d], ref[d], 2e-5) << what << " dim " << d;
      }
    }
  }
}

// Re-positioning: keys written rotated at positions 100.. are moved to 1000.. (rows 5..44 of a
// 50-row block: for kivi4 one whole group requantized and staged rows rotated in f16; row 47
// has no position and must not change). The result matches keys computed at the new positions
// and written directly, each within the format's budgets: one quantization before the move and
// one after (the rotation moves an error between the two dims of a pair, so the budget of the
// row's worst value is taken), plus float rounding. Moving back returns near the start.
TEST_P(KvPoolFormatTest, RepositionEqualsWritingAtNewPositions) {
  std::mt19937 rng(7);
  const int hd = 64, n = 50, first = 5, moved = 40;
  const KvGeometry g = Geometry(hd);
  const std::vector<RopeSpec> rope = {{hd, 10000.0f, kernels::RopeMode::kNormal, {}, 1.0f},
                                      {32, 1e6f, kernels::RopeMode::kNeox, {}, 1.0f}};
  std::vector<std::vector<float>> raw_k;  // per layer (n, heads, hd), before rotation
  std::vector<std::vector<float>> v;
  for (int l = 0; l < g.n_layers; ++l) {
    raw_k.push_back(RandomRows(&rng, n, 2 * hd, true));
    v.push_back(RandomRows(&rng, n, 2 * hd, false));
  }
  // Keys of row r rotated at pos(r) for every layer.
  auto rotated = [&](const std::vector<int64_t>& pos) {
    std::vector<std::vector<float>> k = raw_k;
    for (int l = 0; l < g.n_layers; ++l) {
      for (int r = 0; r < n; ++r) {
        kernels::Rope(&k[l][static_cast<size_t>(r) * 2 * hd], 2, hd, rope[l].rot_dim, pos[r],
                      rope[l].freq_base, rope[l].mode);
      }
    }
    return k;
  };
  std::vector<int64_t> old_pos(n), new_pos(n);
  for (int r = 0; r < n; ++r) {
    old_pos[r] = 100 + r;
    new_pos[r] = r >= first && r < first + moved ? 1000 + (r - first) : old_pos[r];
  }
  auto write = [&](KvPool* pool, const std::vector<std::vector<float>>& k,
                   const std::vector<int64_t>& pos) {
    const int32_t b = *pool->Allocate();
    for (int r = 0; r < n; ++r) {
      for (int l = 0; l < g.n_layers; ++l) {
        pool->WriteToken({b, r}, l, &k[l][static_cast<size_t>(r) * 2 * hd],
                         &v[l][static_cast<size_t>(r) * 2 * hd]);
      }
      if (r != 47) pool->set_rotated_pos({b, r}, pos[r]);
    }
    return b;
  };
  const std::vector<std::vector<float>> k_old = rotated(old_pos), k_new = rotated(new_pos);
  KvPool moved_pool(g, 1, formats()), direct_pool(g, 1, formats());
  const int32_t bm = write(&moved_pool, k_old, old_pos);
  const int32_t bd = write(&direct_pool, k_new, new_pos);
  std::vector<float> row47(2 * hd), unused(2 * hd);
  moved_pool.ReadToken({bm, 47}, 1, row47.data(), unused.data());

  moved_pool.Reposition({bm, first}, moved, 1000, rope);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(moved_pool.rotated_pos({bm, r}), r == 47 ? kNoPosition : new_pos[r]);
  }
  std::vector<float> after47(2 * hd);
  moved_pool.ReadToken({bm, 47}, 1, after47.data(), unused.data());
  EXPECT_EQ(after47, row47) << "a row without a position is left alone";

  const int quantized = Quantized(n);
  auto check = [&](const KvPool& pool, int32_t b, const std::vector<std::vector<float>>& want,
                   const std::vector<std::vector<float>>& before, int quantizations,
                   const std::string& what) {
    for (int l = 0; l < g.n_layers; ++l) {
      std::vector<float> k, vv;
      ReadRows(pool, b, l, n, &k, &vv);
      for (int h = 0; h < 2; ++h) {
        const std::vector<float> in = HeadRows(want[l], n, 2, hd, h);
        const std::vector<float> prev = HeadRows(before[l], n, 2, hd, h);
        const std::vector<float> out = HeadRows(k, n, 2, hd, h);
        const std::vector<double> bud = Budgets(formats().k, true, in, n, hd, quantized);
        const std::vector<double> bud_prev = Budgets(formats().k, true, prev, n, hd, quantized);
        for (int r = 0; r < n; ++r) {
          double worst = 0;
          for (int d = 0; d < hd; ++d) worst = std::max(worst, bud_prev[r * hd + d]);
          for (int d = 0; d < hd; ++d) {
            const size_t i = static_cast<size_t>(r) * hd + d;
            const double tol = quantizations == 1 ? bud[i]
                                                  : bud[i] + (quantizations - 1) * 2 * worst +
                                                        1e-5 * (1 + std::fabs(in[i]));
            ASSERT_NEAR(out[i], in[i], tol)
                << what << " layer " << l << " head " << h << " row " << r << " dim " << d;
          }
        }
      }
    }
  };
  check(direct_pool, bd, k_new, k_new, 1, "written at the new positions");
  check(moved_pool, bm, k_new, k_old, 2, "re-positioned");
  // Back to the old positions: a third quantization.
  moved_pool.Reposition({bm, first}, moved, 100 + first, rope);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(moved_pool.rotated_pos({bm, r}), r == 47 ? kNoPosition : old_pos[r]);
  }
  check(moved_pool, bm, k_old, k_old, 3, "moved +d then -d");
  // Values are never touched by a move.
  for (int l = 0; l < g.n_layers; ++l) {
    std::vector<float> km, vm, kd, vd;
    ReadRows(moved_pool, bm, l, n, &km, &vm);
    ReadRows(direct_pool, bd, l, n, &kd, &vd);
    EXPECT_EQ(vm, vd);
  }
}

std::string FormatsName(const testing::TestParamInfo<std::tuple<KvFormat, KvFormat>>& info) {
  return std::string("K") + KvFormatName(std::get<0>(info.param)) + "_V" +
         KvFormatName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Formats, KvPoolFormatTest,
                         testing::Values(std::tuple{KvFormat::kF16, KvFormat::kF16},
                                         std::tuple{KvFormat::kQ8_0, KvFormat::kQ8_0},
                                         std::tuple{KvFormat::kQ4_0, KvFormat::kQ4_0},
                                         std::tuple{KvFormat::kKivi4, KvFormat::kKivi4},
                                         std::tuple{KvFormat::kQ8_0, KvFormat::kQ4_0},
                                         std::tuple{KvFormat::kKivi4, KvFormat::kF16}),
                         FormatsName);

}  // namespace
}  // namespace kvmem::kv
