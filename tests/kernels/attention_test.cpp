// Attend and AttentionWeights for every KV storage layout (K: f16, q8_0, q4_0, kivi4; V: f16,
// q8_0, q4_0, q4_1) and every ISA against an explicit softmax in double over the same stored
// rows, decoded here from the documented formats (per-row types through the scalar TypeTraits,
// kivi4 groups by this file's own reading of kernels/kivi.h). Many row counts, span layouts
// (empty spans, row strides wider than a row, one buffer per span, kivi4 spans starting inside
// a group, whole groups followed by staged f16 rows, prefixes of spans) and score ranges up to
// +-1e4.
//
// What the kernel computes exactly (the "effective" score, the reference's score here):
//   f16 K and staged kivi4 rows: q . k.
//   q8_0 / q4_0 K: q^ . k with q^ = q quantized to Q8_0 by the ISA's quantizer.
//   kivi4 K: sum_b d_b sum_{c in b} qq_c code_c + sum_c q_c min_c, qq the int8 quantization of
//     x = fl(q * scale) per 32 channels with d_b = max|x| / 127 (kernels/attention.cpp).
// Stated bound of q's quantization, checked on every row against the exact q . k:
//   q8_0 / q4_0: |q^ . k - q . k| <= sum_b delta_b sum_{i in b} |k_i|,
//                delta_b = (1/2 + 2^-4) amax_b / 127 + 2^-18 + 4u amax_b
//     (half a step, the f16 rounding of the block scale times 127 codes, f16 subnormals);
//   kivi4: |score - q . k| <= sum_b (d_b / 2 + 4u amax_b) sum_{c in b} code_c
//                             + u sum_c |q_c scale_c| code_c.
//
// Float error bound of the kernel against the effective score, u = 2^-24: a float dot product of
// head_dim terms plus the scale multiply is within ds_j = (head_dim + 2) u |scale| mag_j, mag_j
// the sum of the magnitudes of the terms; a score error moves the softmax weights by
// w_j (ds_j + max_i ds_i) relative, and exp adds 2u. So, per output dim,
//   |out_d - ref_d| <= 2 sum_j w_j |v_jd - ref_d| (ds_j + max ds + 4u)
//                      + 2 (n + 8) u sum_j w_j vmag_jd
// the second term being the worst case of the float running sums (accumulator and l) over n
// rows, rescales included; vmag = |v|, plus 2 |m| for q4_1 and 16 |d| for q4_0, whose block
// offsets the kernels add apart from d * code.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention_internal.h"
#include "kernels/cpu_features.h"
#include "kernels/kivi.h"
#include "kernels/quant_blocks.h"
#include "kernels/type_traits.h"

namespace kvmem::kernels {
namespace {

constexpr double kU = 1.0 / 16777216.0;
// Absolute slack of a float weight: exp and the normalizing multiply each round a subnormal
// result to a multiple of 2^-149.
constexpr double kWeightUlp = 0x1p-148;
constexpr int kGroup = kKiviGroupRows;

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Where the rows of one kivi4 span sit in their block: the span starts at block row first_row;
// rows [0, written) of the block hold data (so rows past written / 32 * 32 are staged).
struct KiviPlacement {
  int64_t first_row = 0;
  int64_t extra_written = 0;  // written = first_row + n_rows + extra_written
};

// Stored KV rows split over spans, each span in its own buffers so reading past a span is caught
// by ASan.
struct StoredRows {
  KvLayout layout;
  std::vector<std::vector<uint8_t>> k, v;
  std::vector<std::vector<uint16_t>> staging;
  std::vector<KvSpan> spans;
};

std::vector<float> Gaussian(std::mt19937* rng, int n, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// Per-row buffer of n rows of a ggml row type, `pad` garbage bytes after each row.
std::vector<uint8_t> StoreRows(DType type, const std::vector<std::vector<float>>& rows, int hd,
                               size_t row_bytes, size_t pad) {
  const TypeTraits* t = GetTypeTraits(type, Isa::kScalar);
  std::vector<uint8_t> buf(rows.size() * (row_bytes + pad), 0xFF);
  for (size_t r = 0; r < rows.size(); ++r)
    t->from_float(rows[r].data(), &buf[r * (row_bytes + pad)], hd);
  return buf;
}

// Fills spans of the given lengths; row j (over all spans) gets k = key(j), v = value(j).
// pad: bytes of garbage after each per-row K/V row. kivi4: place[s] positions span s in its
// block (rows of the block outside the span are random).
template <typename KeyFn, typename ValueFn>
StoredRows MakeRows(const KvLayout& layout, const std::vector<int64_t>& lengths, size_t pad,
                    const std::vector<KiviPlacement>& place, std::mt19937* rng, KeyFn key,
                    ValueFn value) {
  const int hd = layout.head_dim;
  StoredRows rows;
  rows.layout = layout;
  int64_t j = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int64_t len = lengths[s];
    std::vector<std::vector<float>> kr, vr;
    for (int64_t r = 0; r < len; ++r, ++j) {
      kr.push_back(key(j));
      vr.push_back(value(j));
    }
    KvSpan span;
    span.n_rows = len;
    const size_t v_bytes = VRowBytes(layout.v, hd);
    rows.v.push_back(StoreRows(VRowDType(layout.v), vr, hd, v_bytes, pad));
    span.v_stride = static_cast<int64_t>(v_bytes + pad);
    if (layout.k != KType::kKivi4) {
      const size_t k_bytes = KRowBytes(layout.k, hd);
      rows.k.push_back(StoreRows(KRowDType(layout.k), kr, hd, k_bytes, pad));
      span.k_stride = static_cast<int64_t>(k_bytes + pad);
      rows.staging.emplace_back();
    } else {
      const KiviPlacement p = place.empty() ? KiviPlacement{} : place[s % place.size()];
      const int64_t first = p.first_row, written = first + len + p.extra_written;
      const int64_t quantized = written / kGroup * kGroup;
      // The block's rows, through f16 as the pool stages them.
      std::vector<float> block(written * hd);
      for (int64_t r = 0; r < written; ++r) {
        const std::vector<float> x =
            r >= first && r < first + len ? kr[r - first] : Gaussian(rng, hd, 1.0f);
        for (int d = 0; d < hd; ++d) block[r * hd + d] = F16ToF32(F32ToF16(x[d]));
      }
      const size_t group_bytes = KiviGroupBytes(hd);
      const int64_t g0 = first / kGroup;
      const int64_t g_end =
          len > 0 && first < quantized ? (std::min(first + len, quantized) - 1) / kGroup + 1 : g0;
      std::vector<uint8_t> groups((g_end - g0) * group_bytes);
      for (int64_t g = g0; g < g_end; ++g) {
        QuantizeKiviGroup(&block[g * kGroup * hd], hd, &groups[(g - g0) * group_bytes]);
      }
      std::vector<uint16_t> staged;
      for (int64_t r = std::max(first, quantized); r < first + len; ++r) {
        for (int d = 0; d < hd; ++d) staged.push_back(F32ToF16(block[r * hd + d]));
      }
      rows.k.push_back(std::move(groups));
      rows.staging.push_back(std::move(staged));
      span.k_stride = static_cast<int64_t>(group_bytes);
      span.k_group_row = static_cast<int32_t>(first % kGroup);
      span.k_quantized_rows = std::clamp<int64_t>(quantized - first, 0, len);
    }
    rows.spans.push_back(span);
  }
  for (size_t s = 0; s < rows.spans.size(); ++s) {
    rows.spans[s].k = rows.k[s].empty() ? nullptr : rows.k[s].data();
    rows.spans[s].v = rows.v[s].empty() ? nullptr : rows.v[s].data();
    rows.spans[s].k_staging = rows.staging[s].empty() ? nullptr : rows.staging[s].data();
  }
  return rows;
}

// One row decoded from a span, with what the reference needs to know about it.
struct DecodedRow {
  std::vector<double> k, v;             // dequantized
  std::vector<double> vmag;             // rounding magnitude of each V value
  const uint8_t* kivi_group = nullptr;  // kivi4 quantized rows
  const uint8_t* kivi_codes = nullptr;
  const uint8_t* k_row = nullptr;  // per-row K types
};

int KiviCode(const uint8_t* codes, int c) {
  const uint8_t byte = codes[(c / 32) * 16 + c % 16];
  return c % 32 < 16 ? (byte & 15) : (byte >> 4);
}

// Rows [0, n_rows) of every span, spans in order, decoded from the documented formats.
std::vector<DecodedRow> Decode(const StoredRows& rows) {
  const KvLayout& L = rows.layout;
  const int hd = L.head_dim;
  std::vector<DecodedRow> out;
  std::vector<float> tmp(hd);
  for (const KvSpan& sp : rows.spans) {
    for (int64_t i = 0; i < sp.n_rows; ++i) {
      DecodedRow row;
      row.k.resize(hd);
      if (L.k != KType::kKivi4) {
        row.k_row = sp.k + i * sp.k_stride;
        GetTypeTraits(KRowDType(L.k), Isa::kScalar)->to_float(row.k_row, tmp.data(), hd);
        for (int d = 0; d < hd; ++d) row.k[d] = tmp[d];
      } else if (i < sp.k_quantized_rows) {
        const int64_t r = sp.k_group_row + i;
        row.kivi_group = sp.k + (r / kGroup) * sp.k_stride;
        row.kivi_codes = row.kivi_group + 4 * hd + (r % kGroup) * (hd / 2);
        for (int c = 0; c < hd; ++c) {
          const float s = F16ToF32(LoadU16(row.kivi_group + 2 * c));
          const float m = F16ToF32(LoadU16(row.kivi_group + 2 * hd + 2 * c));
          row.k[c] = s * static_cast<float>(KiviCode(row.kivi_codes, c)) + m;
        }
      } else {
        const uint16_t* p = sp.k_staging + (i - sp.k_quantized_rows) * hd;
        for (int d = 0; d < hd; ++d) row.k[d] = F16ToF32(p[d]);
      }
      const uint8_t* vp = sp.v + i * sp.v_stride;
      GetTypeTraits(VRowDType(L.v), Isa::kScalar)->to_float(vp, tmp.data(), hd);
      row.v.assign(tmp.begin(), tmp.end());
      row.vmag.resize(hd);
      for (int d = 0; d < hd; ++d) {
        row.vmag[d] = std::fabs(row.v[d]);
        // The 4-bit kernels add the block offset (q4_1's m, q4_0's -8 d) apart from d * code.
        if (L.v == VType::kQ4_1) {
          const auto* b = reinterpret_cast<const BlockQ4_1*>(vp) + d / 32;
          row.vmag[d] += 2 * std::fabs(F16ToF32(b->m));
        } else if (L.v == VType::kQ4_0) {
          const auto* b = reinterpret_cast<const BlockQ4_0*>(vp) + d / 32;
          row.vmag[d] += 16 * std::fabs(F16ToF32(b->d));
        }
      }
      out.push_back(std::move(row));
    }
  }
  return out;
}

struct Reference {
  std::vector<double> weights;  // (n_rows)
  std::vector<double> out;      // (head_dim)
  std::vector<double> out_tol;  // (head_dim)
  std::vector<double> w_err;    // (n_rows) relative error bound of each weight
};

// Effective score of one row (see the file comment), its float-rounding magnitude, and whether
// q's quantization stayed within the stated bound.
struct Score {
  double s = 0, mag = 0;
};

// q8: q quantized to Q8_0 by the ISA's quantizer (used for q8_0 / q4_0 K); empty where the kernel
// scores f32 q against the dequantized rows.
Score EffectiveScore(const std::vector<float>& q, const std::vector<BlockQ8_0>& q8,
                     const KvLayout& L, const DecodedRow& row, std::string* bound_violation) {
  const int hd = L.head_dim;
  Score sc;
  double exact = 0;
  for (int d = 0; d < hd; ++d) exact += double{q[d]} * row.k[d];
  double bound = 0;
  if (L.k == KType::kF16 || (L.k == KType::kKivi4 && row.kivi_group == nullptr) ||
      (L.k != KType::kKivi4 && q8.empty())) {
    sc.s = exact;
    for (int d = 0; d < hd; ++d) sc.mag += std::fabs(double{q[d]} * row.k[d]);
    return sc;
  }
  if (L.k == KType::kQ8_0 || L.k == KType::kQ4_0) {
    for (int b = 0; b < hd / 32; ++b) {
      const double dq = F16ToF32(q8[b].d);
      double amax = 0, ksum = 0;
      for (int i = 0; i < 32; ++i) {
        const int c = 32 * b + i;
        const double qh = dq * q8[b].qs[i];
        sc.s += qh * row.k[c];
        sc.mag += std::fabs(qh * row.k[c]);
        amax = std::max(amax, std::fabs(double{q[c]}));
        ksum += std::fabs(row.k[c]);
      }
      bound += ((0.5 + 1.0 / 16) * amax / 127 + std::ldexp(1.0, -18) + 4 * kU * amax) * ksum;
    }
  } else {
    const uint8_t* g = row.kivi_group;
    for (int b = 0; b < hd / 32; ++b) {
      float x[32];
      float amax = 0;
      for (int i = 0; i < 32; ++i) {
        const int c = 32 * b + i;
        x[i] = q[c] * F16ToF32(LoadU16(g + 2 * c));
        amax = std::max(amax, std::fabs(x[i]));
      }
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      double code_sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int c = 32 * b + i;
        const double qq = std::nearbyint(x[i] * id);
        const int code = KiviCode(row.kivi_codes, c);
        sc.s += double{d} * qq * code;
        sc.mag += std::fabs(double{d} * qq) * code;
        code_sum += code;
        bound += kU * std::fabs(x[i]) * code;
      }
      bound += (d / 2.0 + 4 * kU * amax) * code_sum;
    }
    for (int c = 0; c < hd; ++c) {
      const double qm = double{q[c]} * F16ToF32(LoadU16(g + 2 * hd + 2 * c));
      sc.s += qm;
      sc.mag += std::fabs(qm);
    }
  }
  if (std::fabs(sc.s - exact) > bound && bound_violation->empty()) {
    *bound_violation = "q quantization error " + std::to_string(std::fabs(sc.s - exact)) +
                       " over the stated bound " + std::to_string(bound);
  }
  return sc;
}

// exact_q: the kernel scores f32 q against the dequantized K rows (the grouped kernels), rather
// than q quantized to Q8_0 by isa's quantizer (Attend's kernels for q8_0 / q4_0 K).
Reference Attend(const std::vector<float>& q, const StoredRows& rows, float scale, Isa isa,
                 std::string* bound_violation, bool exact_q = false) {
  const int hd = rows.layout.head_dim;
  const std::vector<DecodedRow> decoded = Decode(rows);
  const int64_t n = static_cast<int64_t>(decoded.size());
  std::vector<BlockQ8_0> q8;
  if (!exact_q && (rows.layout.k == KType::kQ8_0 || rows.layout.k == KType::kQ4_0)) {
    q8.resize(hd / 32);
    GetTypeTraits(DType::kQ8_0, isa)->from_float(q.data(), q8.data(), hd);
  }
  Reference ref;
  std::vector<double> s(n), ds(n);
  double max = -INFINITY, ds_max = 0;
  for (int64_t j = 0; j < n; ++j) {
    const Score sc = EffectiveScore(q, q8, rows.layout, decoded[j], bound_violation);
    s[j] = scale * sc.s;
    ds[j] = (hd + 2) * kU * std::fabs(scale) * sc.mag;
    max = std::max(max, s[j]);
    ds_max = std::max(ds_max, ds[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - max);
  ref.out.assign(hd, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    ref.weights.push_back(std::exp(s[j] - max) / sum);
    ref.w_err.push_back(ds[j] + ds_max + 4 * kU);
    for (int d = 0; d < hd; ++d) ref.out[d] += ref.weights[j] * decoded[j].v[d];
  }
  ref.out_tol.assign(hd, 1e-30);
  for (int64_t j = 0; j < n; ++j) {
    for (int d = 0; d < hd; ++d) {
      ref.out_tol[d] +=
          2 * ref.weights[j] * std::fabs(decoded[j].v[d] - ref.out[d]) * ref.w_err[j] +
          2 * (n + 8) * kU * ref.weights[j] * decoded[j].vmag[d];
    }
  }
  return ref;
}

using Param = std::tuple<Isa, KType, VType>;

class AttentionTest : public testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (!CpuSupports(isa())) GTEST_SKIP() << IsaName(isa()) << " not supported here";
  }
  Isa isa() const { return std::get<0>(GetParam()); }
  KvLayout layout(int hd) const { return {std::get<1>(GetParam()), std::get<2>(GetParam()), hd}; }
  bool quantized() const {
    return std::get<1>(GetParam()) != KType::kF16 || std::get<2>(GetParam()) != VType::kF16;
  }
  // The (K, V) pairs a kv::KvFormat names get every row count; the mixed ones a sample.
  bool named_format() const {
    const int k = static_cast<int>(std::get<1>(GetParam()));
    const int v = static_cast<int>(std::get<2>(GetParam()));
    return k == v;
  }

  // Runs Attend and AttentionWeights and checks both against the double reference.
  void Check(const std::vector<float>& q, const StoredRows& rows, float scale,
             const std::string& what, std::vector<float>* result = nullptr) {
    std::string violation;
    const Reference ref = Attend(q, rows, scale, isa(), &violation);
    ASSERT_TRUE(violation.empty()) << what << ": " << violation;
    const int hd = rows.layout.head_dim;
    const int n_spans = static_cast<int>(rows.spans.size());
    std::vector<float> out(hd, NAN);
    kernels::Attend(q.data(), rows.layout, rows.spans.data(), n_spans, scale, out.data(), isa());
    for (int d = 0; d < hd; ++d) {
      ASSERT_NEAR(out[d], ref.out[d], ref.out_tol[d]) << what << " dim " << d;
    }
    // out may alias q.
    std::vector<float> inplace = q;
    kernels::Attend(inplace.data(), rows.layout, rows.spans.data(), n_spans, scale, inplace.data(),
                    isa());
    for (int d = 0; d < hd; ++d) ASSERT_EQ(inplace[d], out[d]) << what << " aliased, dim " << d;
    if (result != nullptr) *result = out;

    const int64_t n = static_cast<int64_t>(ref.weights.size());
    std::vector<float> w(n + 1, -1.0f);
    AttentionWeights(q.data(), rows.layout, rows.spans.data(), n_spans, scale, w.data(), isa());
    ASSERT_EQ(w[n], -1.0f) << what << ": wrote past the last row";
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_NEAR(w[j], ref.weights[j], 2 * ref.weights[j] * ref.w_err[j] + kWeightUlp)
          << what << " row " << j;
      total += w[j];
    }
    // Each weight is e_j * fl(1 / sum e), the sum taken in double over the rounded e_j: 4u.
    if (n > 0) {
      EXPECT_NEAR(total, 1.0, 4 * kU) << what;
    }
  }
};

// Span layouts for n rows: one span, or a cycle of lengths with empty spans among them.
std::vector<int64_t> SpanLengths(int64_t n, bool split) {
  if (!split) return {n};
  static const int64_t kCycle[] = {0, 1, 7, 16, 0, 3, 33, 8, 100, 0, 5, 45};
  std::vector<int64_t> lengths = {0};
  for (int i = 0; n > 0; ++i) {
    const int64_t len = std::min(n, kCycle[i % std::size(kCycle)]);
    lengths.push_back(len);
    n -= len;
  }
  lengths.push_back(0);
  return lengths;
}

// kivi4 placements cycled over the spans of a split layout: starts inside and at the edges of
// groups, with and without rows written after the span.
const std::vector<KiviPlacement> kSplitPlacements = {{0, 0},  {5, 3},  {31, 0},  {32, 40},
                                                     {13, 1}, {45, 0}, {64, 19}, {1, 32}};

std::vector<int64_t> RowCounts(bool all) {
  std::vector<int64_t> counts;
  if (all) {
    for (int64_t n = 0; n <= 300; ++n) counts.push_back(n);
  } else {
    for (int64_t n = 0; n <= 20; ++n) counts.push_back(n);
    for (int64_t n : {31, 32, 33, 45, 63, 64, 65, 100, 255, 256, 257, 300}) counts.push_back(n);
  }
  counts.push_back(1000);
  return counts;
}

std::string Name(int hd, int64_t n, const std::string& extra = "") {
  return "hd " + std::to_string(hd) + " n " + std::to_string(n) + extra;
}

TEST_P(AttentionTest, RandomRowsAllLayouts) {
  std::mt19937 rng(1);
  // Mixed (K, V) pairs share their kernels' halves with the named formats: two head sizes.
  std::vector<int> dims =
      named_format() ? std::vector<int>{64, 128, 256} : std::vector<int>{64, 256};
  if (!quantized()) dims.insert(dims.end(), {40, 36});  // f16 takes any head size
  for (int hd : dims) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int64_t n : RowCounts(named_format() && hd == 64)) {
      for (bool split : {false, true}) {
        const StoredRows rows = MakeRows(
            layout(hd), SpanLengths(n, split), split ? 6 : 0,
            split ? kSplitPlacements : std::vector<KiviPlacement>{}, &rng,
            [&](int64_t) { return Gaussian(&rng, hd, 1.0f); },
            [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
        const std::vector<float> q = Gaussian(&rng, hd, 1.5f);
        Check(q, rows, scale, Name(hd, n, split ? " split" : ""));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// kivi4 spans of one block: every start offset within and across groups, lengths ending in
// whole groups or in staged rows (45 rows = one group + 13 staged), rows written after the span.
class KiviAttentionTest : public AttentionTest {};

TEST_P(KiviAttentionTest, SpansAtAnyRowOfTheirBlock) {
  std::mt19937 rng(4);
  for (int hd : {64, 128}) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int64_t first : {0, 1, 13, 31, 32, 33, 45, 64, 77}) {
      for (int64_t n : {0, 1, 12, 13, 19, 31, 32, 33, 45, 64, 100}) {
        for (int64_t extra : {0, 3, 19, 40}) {
          const StoredRows rows = MakeRows(
              layout(hd), {n}, 0, {{first, extra}}, &rng,
              [&](int64_t) { return Gaussian(&rng, hd, 1.0f); },
              [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
          Check(Gaussian(&rng, hd, 1.5f), rows, scale,
                Name(hd, n, " first " + std::to_string(first) + " extra " + std::to_string(extra)));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// A caller reads a prefix of a span by lowering n_rows (causal masking in a batch): the result
// is attention over exactly those rows, wherever the cut falls (inside the whole groups of a
// kivi4 span, at their end, or among its staged rows).
TEST_P(AttentionTest, LoweredRowCountReadsPrefix) {
  std::mt19937 rng(5);
  const int hd = 64;
  const float scale = 0.125f;
  const std::vector<int64_t> lengths = {70, 45, 100};
  StoredRows rows = MakeRows(
      layout(hd), lengths, 0, {{0, 0}, {7, 0}, {20, 5}}, &rng,
      [&](int64_t) { return Gaussian(&rng, hd, 1.0f); },
      [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
  const std::vector<float> q = Gaussian(&rng, hd, 1.5f);
  for (int64_t cut : {0, 1, 8, 25, 31, 32, 33, 38, 44, 45}) {
    StoredRows cut_rows = rows;
    cut_rows.spans[1].n_rows = std::min(cut, cut_rows.spans[1].n_rows);
    cut_rows.spans[2].n_rows = std::min(cut + 3, cut_rows.spans[2].n_rows);
    Check(q, cut_rows, scale, "cut " + std::to_string(cut));
    if (HasFatalFailure()) return;
  }
}

TEST_P(AttentionTest, ZeroRowsGiveZero) {
  const int hd = 64;
  std::vector<float> q(hd, 1.0f), out(hd, NAN);
  KvSpan empty[2];
  kernels::Attend(q.data(), layout(hd), empty, 2, 0.125f, out.data(), isa());
  for (float x : out) EXPECT_EQ(x, 0.0f);
  kernels::Attend(q.data(), layout(hd), nullptr, 0, 0.125f, out.data(), isa());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// Scores with a spread of 1e4: the softmax is close to one-hot and any exp without max
// subtraction overflows.
TEST_P(AttentionTest, HugeScoresStayFinite) {
  std::mt19937 rng(2);
  for (int hd : {64, 256}) {
    for (int64_t n : {1, 9, 300, 1000}) {
      for (float target : {30.0f, 1e3f, 1e4f}) {
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const StoredRows rows = MakeRows(
            layout(hd), SpanLengths(n, true), 16, kSplitPlacements, &rng,
            [&](int64_t) { return Gaussian(&rng, hd, 1.0f); },
            [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
        // std(score) = scale * sigma_q * sqrt(hd) = target.
        const std::vector<float> q = Gaussian(&rng, hd, target);
        std::vector<float> out;
        Check(q, rows, scale, Name(hd, n, " spread " + std::to_string(target)), &out);
        if (HasFatalFailure()) return;
        for (float x : out) ASSERT_TRUE(std::isfinite(x));
      }
    }
  }
}

// Scores that rise (the running max grows at every row, so the accumulator is rescaled every
// time), fall, or are all equal (uniform weights).
TEST_P(AttentionTest, MonotoneAndEqualScores) {
  std::mt19937 rng(3);
  const int hd = 64;
  const float scale = 0.125f;
  std::vector<float> q(hd, 0.0f);
  q[0] = 8.0f;  // score_j = k_j[0]
  for (int64_t n : {1, 8, 9, 300, 1000}) {
    for (float slope : {1.0f, -1.0f, 0.0f}) {
      auto key = [&](int64_t j) {
        std::vector<float> k = Gaussian(&rng, hd, 1.0f);
        // Rising or falling from -1e4 to 1e4 in steps f16 can hold near the ends.
        k[0] = slope * (-1e4f + 2e4f * static_cast<float>(j) / static_cast<float>(n));
        if (slope == 0.0f) k[0] = 3.0f;
        return k;
      };
      const StoredRows rows = MakeRows(layout(hd), SpanLengths(n, true), 0, kSplitPlacements, &rng,
                                       key, [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
      Check(q, rows, scale, "n " + std::to_string(n) + " slope " + std::to_string(slope));
      if (HasFatalFailure()) return;
    }
  }
}

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  return std::string(IsaName(std::get<0>(info.param))) + "_K" + KTypeName(std::get<1>(info.param)) +
         "_V" + VTypeName(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, AttentionTest,
    testing::Combine(testing::Values(Isa::kScalar, Isa::kAvx2),
                     testing::Values(KType::kF16, KType::kQ8_0, KType::kQ4_0, KType::kKivi4),
                     testing::Values(VType::kF16, VType::kQ8_0, VType::kQ4_0, VType::kQ4_1)),
    ParamName);

INSTANTIATE_TEST_SUITE_P(
    KiviLayouts, KiviAttentionTest,
    testing::Combine(testing::Values(Isa::kScalar, Isa::kAvx2), testing::Values(KType::kKivi4),
                     testing::Values(VType::kF16, VType::kQ8_0, VType::kQ4_0, VType::kQ4_1)),
    ParamName);

// The AVX2 kernel against the scalar one directly. Where both quantize q the same way (f16 and
// kivi4 K) they share one reference, so they agree within twice its bound; for q8_0 / q4_0 K the
// two ISAs' Q8_0 quantizers round ties differently, so they agree within the reference bounds
// plus the stated q-quantization bound's effect, checked here as a 2% relative difference.
class Avx2VsScalarTest : public testing::TestWithParam<std::tuple<KType, VType>> {
 protected:
  void SetUp() override {
    if (!CpuSupports(Isa::kAvx2)) GTEST_SKIP() << "AVX2 not supported here";
  }
  KvLayout layout(int hd) const { return {std::get<0>(GetParam()), std::get<1>(GetParam()), hd}; }
};

TEST_P(Avx2VsScalarTest, Avx2MatchesScalar) {
  std::mt19937 rng(6);
  for (int hd : {64, 128, 256}) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int64_t n : {1, 7, 8, 9, 45, 77, 300}) {
      const StoredRows rows = MakeRows(
          layout(hd), SpanLengths(n, true), 2, kSplitPlacements, &rng,
          [&](int64_t) { return Gaussian(&rng, hd, 1.0f); },
          [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
      const std::vector<float> q = Gaussian(&rng, hd, 1.5f);
      std::string violation;
      const Reference ref = Attend(q, rows, scale, Isa::kAvx2, &violation);
      std::vector<float> a(hd), s(hd);
      const int n_spans = static_cast<int>(rows.spans.size());
      kernels::Attend(q.data(), rows.layout, rows.spans.data(), n_spans, scale, a.data(),
                      Isa::kAvx2);
      kernels::Attend(q.data(), rows.layout, rows.spans.data(), n_spans, scale, s.data(),
                      Isa::kScalar);
      const KType k = std::get<0>(GetParam());
      for (int d = 0; d < hd; ++d) {
        const double tol = k == KType::kF16 || k == KType::kKivi4
                               ? 2 * ref.out_tol[d]
                               : 2 * ref.out_tol[d] + 0.02 * (std::fabs(s[d]) + 0.05);
        ASSERT_NEAR(a[d], s[d], tol) << Name(hd, n) << " dim " << d;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, Avx2VsScalarTest,
    testing::Combine(testing::Values(KType::kF16, KType::kQ8_0, KType::kQ4_0, KType::kKivi4),
                     testing::Values(VType::kF16, VType::kQ8_0, VType::kQ4_0, VType::kQ4_1)),
    [](const testing::TestParamInfo<std::tuple<KType, VType>>& info) {
      return std::string("K") + KTypeName(std::get<0>(info.param)) + "_V" +
             VTypeName(std::get<1>(info.param));
    });

// AttendPartial: several queries over the same rows, the rows split into parts at any row and
// merged in order, against the double-precision reference of each query: the AVX2 grouped kernel
// (f16), the AVX-512 one (f16 and q8_0 K and V, where this CPU has it; q8_0 K scored with q
// quantized to Q8_0 where head_dim % 64 == 0), and the dispatching entry point.
using GroupFn = std::function<void(const float*, int, const KvLayout&, const KvSpan*, int, float,
                                   float*, float*, float*)>;

TEST(AttendPartial, GroupedSplitAndMergedMatchesReference) {
  if (!AttendPartialSupported({KType::kF16, VType::kF16, 64})) GTEST_SKIP() << "no AVX2 here";
  struct Kernel {
    std::string name;
    GroupFn fn;
    std::vector<std::pair<KType, VType>> types;
  };
  const std::vector<std::pair<KType, VType>> f16_only = {{KType::kF16, VType::kF16}};
  const std::vector<std::pair<KType, VType>> with_q8 = {{KType::kF16, VType::kF16},
                                                        {KType::kQ8_0, VType::kQ8_0},
                                                        {KType::kQ8_0, VType::kF16},
                                                        {KType::kF16, VType::kQ8_0}};
  std::vector<Kernel> kernels = {
      {"avx2",
       [](const float* q, int n_q, const KvLayout& L, const KvSpan* sp, int n_sp, float scale,
          float* acc, float* m, float* l) {
         AttendF16GroupAvx2(q, n_q, L.head_dim, sp, n_sp, scale, acc, m, l);
       },
       f16_only},
      {"dispatch",
       [](const float* q, int n_q, const KvLayout& L, const KvSpan* sp, int n_sp, float scale,
          float* acc, float* m, float* l) {
         AttendPartial(q, n_q, L, sp, n_sp, scale, acc, m, l);
       },
       Avx512Enabled() ? with_q8 : f16_only}};
  if (Avx512Enabled()) kernels.push_back({"avx512", AttendGroupAvx512, with_q8});
  // Without AVX-512, q8_0 layouts are not taken by the grouped path.
  EXPECT_EQ(AttendPartialSupported({KType::kQ8_0, VType::kQ8_0, 64}), Avx512Enabled());
  EXPECT_FALSE(AttendPartialSupported({KType::kQ4_0, VType::kQ8_0, 64}));
  std::mt19937 rng(21);
  for (const Kernel& kernel : kernels) {
    for (const auto& [kt, vt] : kernel.types) {
      SCOPED_TRACE(kernel.name + " K " + KTypeName(kt) + " V " + VTypeName(vt));
      int variant = 0;
      for (int hd : {64, 96, 128, 256}) {
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const KvLayout layout{kt, vt, hd};
        // Rows within one 16-row block, across tiles (256) and segments (1024) of the AVX-512
        // kernel; groups of 1 to 8 queries (it takes them in passes of at most 4).
        for (int64_t n : {1, 9, 300, 1100}) {
          const StoredRows rows = MakeRows(
              layout, SpanLengths(n, true), 2, kSplitPlacements, &rng,
              [&](int64_t) { return Gaussian(&rng, hd, 1.0f); },
              [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
          const int n_q = std::array{3, 1, 5, 8, 4}[variant++ % 5];
          std::vector<float> q;
          for (int g = 0; g < n_q; ++g) {
            const std::vector<float> qg = Gaussian(&rng, hd, 1.5f);
            q.insert(q.end(), qg.begin(), qg.end());
          }
          for (int64_t cut : {int64_t{0}, n / 3, n}) {
            // Part 1: the spans' rows [0, cut); part 2: [cut, n).
            std::vector<KvSpan> a, b;
            int64_t base = 0;
            for (const KvSpan& sp : rows.spans) {
              const int64_t take = std::clamp<int64_t>(cut - base, 0, sp.n_rows);
              if (take > 0) a.push_back({sp.k, sp.v, take, sp.k_stride, sp.v_stride});
              if (take < sp.n_rows) {
                b.push_back({sp.k + take * sp.k_stride, sp.v + take * sp.v_stride,
                             sp.n_rows - take, sp.k_stride, sp.v_stride});
              }
              base += sp.n_rows;
            }
            std::vector<float> acc(n_q * hd), acc2(n_q * hd), m(n_q), m2(n_q), l(n_q), l2(n_q);
            kernel.fn(q.data(), n_q, layout, a.data(), static_cast<int>(a.size()), scale,
                      acc.data(), m.data(), l.data());
            kernel.fn(q.data(), n_q, layout, b.data(), static_cast<int>(b.size()), scale,
                      acc2.data(), m2.data(), l2.data());
            MergeAttendPartial(n_q, hd, acc.data(), m.data(), l.data(), acc2.data(), m2.data(),
                               l2.data());
            std::vector<float> out(n_q * hd);
            FinishAttendPartial(n_q, hd, acc.data(), m.data(), l.data(), nullptr, out.data());
            for (int g = 0; g < n_q; ++g) {
              const std::vector<float> qg(q.begin() + g * hd, q.begin() + (g + 1) * hd);
              std::string violation;
              // The AVX-512 kernel scores q8_0 K in integers, q quantized as Attend's kernels
              // do, where head_dim is a multiple of 64.
              const bool exact_q = kernel.name == "avx2" || kt != KType::kQ8_0 || hd % 64 != 0;
              const Reference ref = Attend(qg, rows, scale, Isa::kAvx2, &violation, exact_q);
              ASSERT_TRUE(violation.empty()) << violation;
              for (int d = 0; d < hd; ++d) {
                ASSERT_NEAR(out[g * hd + d], ref.out[d], 2 * ref.out_tol[d])
                    << Name(hd, n) << " cut " << cut << " query " << g << " dim " << d;
              }
            }
          }
        }
      }
    }
  }
}

TEST(KvLayout, RowBytes) {
  // head_dim 64: f16 128 B; Q8_0 2 x 34; Q4_0 2 x 18; Q4_1 2 x 20; kivi4 K 32 B of codes + f16
  // scale and min per channel shared by 32 rows (2 * 2 * 64 / 32 = 8 B).
  EXPECT_EQ(KRowBytes(KType::kF16, 64), 128u);
  EXPECT_EQ(KRowBytes(KType::kQ8_0, 64), 68u);
  EXPECT_EQ(KRowBytes(KType::kQ4_0, 64), 36u);
  EXPECT_EQ(KRowBytes(KType::kKivi4, 64), 40u);
  EXPECT_EQ(VRowBytes(VType::kF16, 64), 128u);
  EXPECT_EQ(VRowBytes(VType::kQ8_0, 64), 68u);
  EXPECT_EQ(VRowBytes(VType::kQ4_0, 64), 36u);
  EXPECT_EQ(VRowBytes(VType::kQ4_1, 64), 40u);
  EXPECT_EQ(KiviGroupBytes(128), 2u * 128 * 2 + 32u * 64);
  EXPECT_EQ(KRowBytes(KType::kKivi4, 128), 80u);
  EXPECT_TRUE(KvLayoutValid({KType::kF16, VType::kF16, 40}));
  EXPECT_FALSE(KvLayoutValid({KType::kQ8_0, VType::kF16, 40}));
  EXPECT_FALSE(KvLayoutValid({KType::kF16, VType::kQ4_1, 48}));
  EXPECT_TRUE(KvLayoutValid({KType::kKivi4, VType::kQ4_1, 96}));
}

// The documented kivi4 group layout and its error budget: per channel, half a quantization
// step plus f16 roundings, over every code (a channel sweeping 0..15 exactly) and random rows.
TEST(Kivi, GroupRoundTrip) {
  std::mt19937 rng(7);
  for (int hd : {32, 64, 128}) {
    std::vector<float> x(kGroup * hd);
    for (int trial = 0; trial < 20; ++trial) {
      for (int r = 0; r < kGroup; ++r) {
        const std::vector<float> row = Gaussian(&rng, hd, trial % 2 ? 3.0f : 0.1f);
        for (int c = 0; c < hd; ++c) x[r * hd + c] = row[c] + (c == 5 ? 100.0f : 0.0f);
      }
      // Channel 0 takes each code twice: values min + code * step exactly.
      for (int r = 0; r < kGroup; ++r) x[r * hd] = -1.0f + 0.25f * static_cast<float>(r % 16);
      std::vector<uint8_t> group(KiviGroupBytes(hd));
      QuantizeKiviGroup(x.data(), hd, group.data());
      std::vector<float> y(kGroup * hd), row(hd);
      DequantizeKiviGroup(group.data(), hd, y.data());
      for (int c = 0; c < hd; ++c) {
        float lo = x[c], hi = x[c];
        for (int r = 0; r < kGroup; ++r) {
          lo = std::min(lo, x[r * hd + c]);
          hi = std::max(hi, x[r * hd + c]);
        }
        const double step = F16ToF32(LoadU16(group.data() + 2 * c));
        const double budget =
            0.51 * step + std::ldexp(1.0, -10) * std::max(std::fabs(lo), std::fabs(hi)) + 1e-6;
        for (int r = 0; r < kGroup; ++r) {
          ASSERT_NEAR(y[r * hd + c], x[r * hd + c], budget) << "hd " << hd << " c " << c;
          if (c == 0) {
            ASSERT_EQ(y[r * hd], x[r * hd]) << "exact codes, row " << r;
          }
        }
      }
      for (int r = 0; r < kGroup; ++r) {
        DequantizeKiviRow(group.data(), hd, r, row.data());
        for (int c = 0; c < hd; ++c) ASSERT_EQ(row[c], y[r * hd + c]);
      }
    }
  }
}

}  // namespace
}  // namespace kvmem::kernels
