// AttendF16 (every ISA) and AttentionWeightsF16 against an explicit softmax in double over the
// same F16 rows, for many row counts, span layouts (empty spans, row strides wider than
// head_dim, one buffer per span) and score ranges up to +-1e4.
//
// Error bound, u = 2^-24: a float dot product of head_dim terms plus the scale multiply is within
// ds_j = (head_dim + 2) u |scale| sum_d |q_d k_jd| of the exact score; a score error moves the
// softmax weights by w_j (ds_j + max_i ds_i) relative, and exp adds 2u. So, per output dim,
//   |out_d - ref_d| <= 2 sum_j w_j |v_jd - ref_d| (ds_j + max ds + 4u)
//                      + 2 (n + 8) u sum_j w_j |v_jd|
// the second term being the worst case of the float running sums (accumulator and l) over n
// rows, rescales included.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu_features.h"

namespace kvmem::kernels {
namespace {

constexpr double kU = 1.0 / 16777216.0;

// KV rows split over spans, each span in its own buffers so reading past a span is caught by
// ASan.
struct KvRows {
  int head_dim = 0;
  std::vector<std::vector<uint16_t>> k, v;  // per span: (n_rows, stride) f16
  std::vector<KvSpan> spans;

  int64_t n_rows() const {
    int64_t n = 0;
    for (const KvSpan& s : spans) n += s.n_rows;
    return n;
  }
  // Row j over all spans, as floats.
  std::vector<float> Row(bool key, int64_t j) const {
    for (const KvSpan& s : spans) {
      if (j < s.n_rows) {
        const uint16_t* p = (key ? s.k : s.v) + j * s.stride;
        std::vector<float> r(head_dim);
        for (int d = 0; d < head_dim; ++d) r[d] = F16ToF32(p[d]);
        return r;
      }
      j -= s.n_rows;
    }
    return {};
  }
};

// Fills spans of the given lengths; row j (over all spans) gets k = key(j), v = value(j).
template <typename KeyFn, typename ValueFn>
KvRows MakeRows(int head_dim, const std::vector<int64_t>& lengths, int64_t stride, KeyFn key,
                ValueFn value) {
  KvRows rows;
  rows.head_dim = head_dim;
  int64_t j = 0;
  for (int64_t len : lengths) {
    std::vector<uint16_t> k(len * stride, 0x7e00), v(len * stride, 0x7e00);  // NaN padding
    for (int64_t r = 0; r < len; ++r, ++j) {
      const std::vector<float> kr = key(j), vr = value(j);
      for (int d = 0; d < head_dim; ++d) {
        k[r * stride + d] = F32ToF16(kr[d]);
        v[r * stride + d] = F32ToF16(vr[d]);
      }
    }
    rows.k.push_back(std::move(k));
    rows.v.push_back(std::move(v));
  }
  for (size_t s = 0; s < lengths.size(); ++s) {
    rows.spans.push_back({rows.k[s].data(), rows.v[s].data(), lengths[s], stride});
  }
  return rows;
}

// Span layouts for n rows: one span, or a cycle of lengths with empty spans among them.
std::vector<int64_t> SpanLengths(int64_t n, bool split) {
  if (!split) return {n};
  static const int64_t kCycle[] = {0, 1, 7, 16, 0, 3, 33, 8, 100, 0, 5};
  std::vector<int64_t> lengths = {0};
  for (int i = 0; n > 0; ++i) {
    const int64_t len = std::min(n, kCycle[i % std::size(kCycle)]);
    lengths.push_back(len);
    n -= len;
  }
  lengths.push_back(0);
  return lengths;
}

struct Reference {
  std::vector<double> weights;  // (n_rows)
  std::vector<double> out;      // (head_dim)
  std::vector<double> out_tol;  // (head_dim)
  std::vector<double> w_err;    // (n_rows) relative error bound of each weight
};

Reference Attend(const std::vector<float>& q, const KvRows& rows, float scale) {
  const int hd = rows.head_dim;
  const int64_t n = rows.n_rows();
  Reference ref;
  std::vector<double> s(n), ds(n);
  double max = -INFINITY, ds_max = 0;
  for (int64_t j = 0; j < n; ++j) {
    const std::vector<float> k = rows.Row(true, j);
    double dot = 0, mag = 0;
    for (int d = 0; d < hd; ++d) {
      dot += double{q[d]} * k[d];
      mag += std::fabs(double{q[d]} * k[d]);
    }
    s[j] = scale * dot;
    ds[j] = (hd + 2) * kU * std::fabs(scale) * mag;
    max = std::max(max, s[j]);
    ds_max = std::max(ds_max, ds[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - max);
  ref.out.assign(hd, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    ref.weights.push_back(std::exp(s[j] - max) / sum);
    ref.w_err.push_back(ds[j] + ds_max + 4 * kU);
    const std::vector<float> v = rows.Row(false, j);
    for (int d = 0; d < hd; ++d) ref.out[d] += ref.weights[j] * v[d];
  }
  ref.out_tol.assign(hd, 1e-30);
  for (int64_t j = 0; j < n; ++j) {
    const std::vector<float> v = rows.Row(false, j);
    for (int d = 0; d < hd; ++d) {
      ref.out_tol[d] += 2 * ref.weights[j] * std::fabs(v[d] - ref.out[d]) * ref.w_err[j] +
                        2 * (n + 8) * kU * ref.weights[j] * std::fabs(v[d]);
    }
  }
  return ref;
}

class AttentionTest : public testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!CpuSupports(GetParam())) GTEST_SKIP() << IsaName(GetParam()) << " not supported here";
  }

  // Runs AttendF16 and AttentionWeightsF16 and checks both against the double reference.
  void Check(const std::vector<float>& q, const KvRows& rows, float scale,
             const std::string& what) {
    const Reference ref = Attend(q, rows, scale);
    const int hd = rows.head_dim;
    std::vector<float> out(hd, NAN);
    AttendF16(q.data(), hd, rows.spans.data(), static_cast<int>(rows.spans.size()), scale,
              out.data(), GetParam());
    for (int d = 0; d < hd; ++d) {
      ASSERT_NEAR(out[d], ref.out[d], ref.out_tol[d]) << what << " dim " << d;
    }
    // out may alias q.
    std::vector<float> inplace = q;
    AttendF16(inplace.data(), hd, rows.spans.data(), static_cast<int>(rows.spans.size()), scale,
              inplace.data(), GetParam());
    for (int d = 0; d < hd; ++d) ASSERT_EQ(inplace[d], out[d]) << what << " aliased, dim " << d;

    const int64_t n = rows.n_rows();
    std::vector<float> w(n + 1, -1.0f);
    AttentionWeightsF16(q.data(), hd, rows.spans.data(), static_cast<int>(rows.spans.size()), scale,
                        w.data());
    ASSERT_EQ(w[n], -1.0f) << what << ": wrote past the last row";
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_NEAR(w[j], ref.weights[j], 2 * ref.weights[j] * ref.w_err[j] + 1e-45)
          << what << " row " << j;
      total += w[j];
    }
    // Each weight is e_j * fl(1 / sum e), the sum taken in double over the rounded e_j: 4u.
    if (n > 0) {
      EXPECT_NEAR(total, 1.0, 4 * kU) << what;
    }
  }
};

std::vector<float> Gaussian(std::mt19937* rng, int n, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

std::vector<int64_t> RowCounts() {
  std::vector<int64_t> counts;
  for (int64_t n = 0; n <= 20; ++n) counts.push_back(n);
  for (int64_t n : {31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 300, 1000}) counts.push_back(n);
  return counts;
}

TEST_P(AttentionTest, RandomRowsAllLayouts) {
  std::mt19937 rng(1);
  for (int hd : {64, 128, 256, 40, 36}) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int64_t n : RowCounts()) {
      for (bool split : {false, true}) {
        const int64_t stride = split ? hd + 3 : hd;
        const KvRows rows = MakeRows(
            hd, SpanLengths(n, split), stride, [&](int64_t) { return Gaussian(&rng, hd, 1.0f); },
            [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
        const std::vector<float> q = Gaussian(&rng, hd, 1.5f);
        Check(q, rows, scale,
              "hd " + std::to_string(hd) + " n " + std::to_string(n) + (split ? " split" : ""));
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(AttentionTest, ZeroRowsGiveZero) {
  const int hd = 64;
  std::vector<float> q(hd, 1.0f), out(hd, NAN);
  const KvSpan empty[2] = {{nullptr, nullptr, 0, hd}, {nullptr, nullptr, 0, hd}};
  AttendF16(q.data(), hd, empty, 2, 0.125f, out.data(), GetParam());
  for (float x : out) EXPECT_EQ(x, 0.0f);
  AttendF16(q.data(), hd, nullptr, 0, 0.125f, out.data(), GetParam());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// Scores with a spread of 1e4: the softmax is close to one-hot and any exp without max
// subtraction overflows.
TEST_P(AttentionTest, HugeScoresStayFinite) {
  std::mt19937 rng(2);
  for (int hd : {64, 128, 256}) {
    for (int64_t n : {1, 2, 9, 300, 1000}) {
      for (float target : {30.0f, 1e3f, 1e4f}) {
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const KvRows rows = MakeRows(
            hd, SpanLengths(n, true), hd + 8, [&](int64_t) { return Gaussian(&rng, hd, 1.0f); },
            [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
        // std(score) = scale * sigma_q * sqrt(hd) = target.
        const std::vector<float> q = Gaussian(&rng, hd, target);
        Check(q, rows, scale,
              "hd " + std::to_string(hd) + " n " + std::to_string(n) + " spread " +
                  std::to_string(target));
        if (HasFatalFailure()) return;
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
      const KvRows rows = MakeRows(hd, SpanLengths(n, true), hd, key,
                                   [&](int64_t) { return Gaussian(&rng, hd, 1.0f); });
      Check(q, rows, scale, "n " + std::to_string(n) + " slope " + std::to_string(slope));
      if (HasFatalFailure()) return;
    }
  }
}

std::string IsaParamName(const testing::TestParamInfo<Isa>& info) { return IsaName(info.param); }

INSTANTIATE_TEST_SUITE_P(AllIsas, AttentionTest, testing::Values(Isa::kScalar, Isa::kAvx2),
                         IsaParamName);

}  // namespace
}  // namespace kvmem::kernels
