// OpsTable and RoPE: every ISA's table against the scalar table (all lengths 0..130, pointers
// offset by 0..7 floats) and every table against double-precision formulas, with the error bounds
// stated next to each check. u = 2^-24, the unit roundoff of float.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"

namespace kvmem::kernels {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24
constexpr int kMaxLen = 130;             // 2N + 2 for N = 64: every tail length, twice over
constexpr int kMaxOffset = 7;

// Distance in units in the last place; finite floats of either sign.
int64_t UlpDistance(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

std::vector<float> RandomVector(std::mt19937* rng, int64_t n, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

class OpsTest : public testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!CpuSupports(GetParam())) GTEST_SKIP() << IsaName(GetParam()) << " not supported here";
  }
  const OpsTable& ops() const { return GetOps(GetParam()); }
  const OpsTable& ref() const { return GetOps(Isa::kScalar); }
};

// Calls check(n, offset) for every length 0..kMaxLen and pointer offset 0..kMaxOffset floats.
template <typename F>
void ForLengthsAndOffsets(F check) {
  for (int n = 0; n <= kMaxLen; ++n) {
    for (int off = 0; off <= kMaxOffset; ++off) check(n, off);
  }
}

// exp is within 2 ulp of the correctly rounded result (here: every 509th float in [-89, 89]
// and every 31st down to -104; both tables measure 1 ulp, and the AVX2 one is 1 ulp over all
// 2.2e9 floats in [-104, 89]), overflows to inf, underflows to 0 and keeps NaN.
TEST_P(OpsTest, ExpUlpError) {
  std::vector<float> x;
  for (uint32_t bits = 0; bits <= 0x42b20000u; bits += 509) {  // 0 .. 89
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
    x.push_back(-f);
  }
  for (uint32_t bits = 0x42b20000u; bits <= 0x42d00000u; bits += 31) {  // -89 .. -104
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(-f);
  }
  std::vector<float> y(x.size());
  ops().exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
  int64_t max_ulp = 0;
  float worst = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x[i])));
    ASSERT_EQ(std::isinf(want), std::isinf(y[i])) << x[i];
    if (std::isinf(want)) continue;
    const int64_t ulp = UlpDistance(y[i], want);
    if (ulp > max_ulp) max_ulp = ulp, worst = x[i];
  }
  EXPECT_LE(max_ulp, 2) << "at x = " << worst;
  RecordProperty("exp_max_ulp", std::to_string(max_ulp));
  std::printf("[%s] exp max error %lld ulp (at x = %g) over %zu inputs\n", IsaName(GetParam()),
              static_cast<long long>(max_ulp), worst, x.size());

  const float special[] = {INFINITY, -INFINITY, NAN, 89.0f, 1e30f, -110.0f, -1e30f, 0.0f};
  float out[8];
  ops().exp(special, out, 8);
  EXPECT_EQ(out[0], INFINITY);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], INFINITY);
  EXPECT_EQ(out[4], INFINITY);
  EXPECT_EQ(out[5], 0.0f);
  EXPECT_EQ(out[6], 0.0f);
  EXPECT_EQ(out[7], 1.0f);
}

// rms_norm against the scalar table: both sum float squares in double, so they differ only
// when the sums round differently: within 2 ulp.
TEST_P(OpsTest, RmsNormMatchesScalar) {
  std::mt19937 rng(1);
  ForLengthsAndOffsets([&](int n, int off) {
    std::vector<float> x = RandomVector(&rng, n + off, 3.0f);
    std::vector<float> w = RandomVector(&rng, n + off, 1.0f);
    std::vector<float> y(n + off), want(n + off);
    const float* weights[] = {nullptr, w.data() + off};
    for (const float* wp : weights) {
      ops().rms_norm(x.data() + off, wp, y.data() + off, n, 1e-5f);
      ref().rms_norm(x.data() + off, wp, want.data() + off, n, 1e-5f);
      for (int i = off; i < n + off; ++i) ASSERT_LE(UlpDistance(y[i], want[i]), 2) << n << " " << i;
    }
    // In place.
    std::vector<float> inplace = x;
    ops().rms_norm(inplace.data() + off, w.data() + off, inplace.data() + off, n, 1e-5f);
    ref().rms_norm(x.data() + off, w.data() + off, want.data() + off, n, 1e-5f);
    for (int i = off; i < n + off; ++i) ASSERT_LE(UlpDistance(inplace[i], want[i]), 2);
  });
}

// rms_norm against double: six roundings (square, mean, + eps, sqrt, divide, two multiplies)
// bound the error by 8u relative.
TEST_P(OpsTest, RmsNormMatchesDouble) {
  std::mt19937 rng(2);
  for (int n : {1, 7, 64, 576, 2048}) {
    std::vector<float> x = RandomVector(&rng, n, 2.0f);
    std::vector<float> w = RandomVector(&rng, n, 1.0f);
    std::vector<float> y(n);
    ops().rms_norm(x.data(), w.data(), y.data(), n, 1e-6f);
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double scale = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int i = 0; i < n; ++i) {
      const double want = x[i] * scale * w[i];
      ASSERT_NEAR(y[i], want, 8 * kU * std::fabs(want)) << n << " " << i;
    }
  }
}

// swiglu/geglu against the scalar table: the vector exp is within 2 ulp of expf, which moves
// 1 / (1 + e) by at most as much; with the divide and multiply, 8 ulp. For geglu the argument
// -2y may also round differently (the AVX2 table fuses a multiply-add), which exp amplifies
// |2y| times: both tables are within (8 + 8|y|)u of exact (GluMatchesDouble), so within twice
// that of each other.
TEST_P(OpsTest, GluMatchesScalar) {
  std::mt19937 rng(3);
  for (auto glu : {&OpsTable::swiglu, &OpsTable::geglu}) {
    ForLengthsAndOffsets([&](int n, int off) {
      std::vector<float> g = RandomVector(&rng, n + off, 6.0f);
      std::vector<float> u = RandomVector(&rng, n + off, 1.0f);
      std::vector<float> out(n + off), want(n + off);
      (ops().*glu)(g.data() + off, u.data() + off, out.data() + off, n);
      (ref().*glu)(g.data() + off, u.data() + off, want.data() + off, n);
      for (int i = off; i < n + off; ++i) {
        if (glu == &OpsTable::swiglu) {
          ASSERT_LE(UlpDistance(out[i], want[i]), 8) << n << " " << i << " gate " << g[i];
        } else {
          const double x = g[i];
          const double y = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
          ASSERT_NEAR(out[i], want[i], (16 + 16 * std::fabs(y)) * kU * std::fabs(want[i]))
              << n << " " << i << " gate " << g[i];
        }
      }
      // out aliasing gate, then up.
      std::vector<float> a = g, b = u;
      (ops().*glu)(a.data() + off, u.data() + off, a.data() + off, n);
      (ops().*glu)(g.data() + off, b.data() + off, b.data() + off, n);
      for (int i = off; i < n + off; ++i) {
        ASSERT_EQ(a[i], out[i]);
        ASSERT_EQ(b[i], out[i]);
      }
    });
  }
}

// swiglu against silu in double: exp (2u), 1 + e, divide, multiply: 8u relative. Below -88.7
// exp(-x) overflows float and the result is -0 where the exact one is under 1e-36 in size.
// geglu against 0.5 x (1 + tanh(y)) in double: y is formed in float (4u relative), which moves
// exp(-2y) by 4u |2y| relative, so the bound is (8 + 8|y|)u relative.
TEST_P(OpsTest, GluMatchesDouble) {
  std::mt19937 rng(4);
  const int n = 4096;
  std::vector<float> g = RandomVector(&rng, n, 5.0f);
  g[0] = 0.0f, g[1] = -20.0f, g[2] = 20.0f, g[3] = -90.0f, g[4] = 90.0f, g[5] = 1e-20f;
  std::vector<float> u = RandomVector(&rng, n, 1.0f);
  std::vector<float> out(n);
  ops().swiglu(g.data(), u.data(), out.data(), n);
  for (int i = 0; i < n; ++i) {
    const double x = g[i];
    const double want = x / (1.0 + std::exp(-x)) * u[i];
    ASSERT_NEAR(out[i], want, 8 * kU * std::fabs(want) + 1e-36) << x;
  }
  ops().geglu(g.data(), u.data(), out.data(), n);
  for (int i = 0; i < n; ++i) {
    const double x = g[i];
    const double y = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
    const double want = 0.5 * x * (1.0 + std::tanh(y)) * u[i];
    // For y < -9, 1 + tanh(y) underflows double's precision; use the exact equivalent form.
    const double want_tail = x / (1.0 + std::exp(-2.0 * y)) * u[i];
    const double w = y < -9 ? want_tail : want;
    ASSERT_NEAR(out[i], w, (8 + 8 * std::fabs(y)) * kU * std::fabs(w) + 1e-36) << x;
  }
}

// softmax against the scalar table: same max, exps within 2 ulp of each other, double sums:
// 5 ulp.
TEST_P(OpsTest, SoftmaxMatchesScalar) {
  std::mt19937 rng(5);
  ForLengthsAndOffsets([&](int n, int off) {
    if (n == 0) return;
    std::vector<float> x = RandomVector(&rng, n + off, 8.0f);
    std::vector<float> want = x;
    ops().softmax(x.data() + off, n);
    ref().softmax(want.data() + off, n);
    for (int i = off; i < n + off; ++i) ASSERT_LE(UlpDistance(x[i], want[i]), 5) << n << " " << i;
  });
}

// softmax against double: x - max is rounded (u |x - max| absolute, which exp turns into a
// relative error), exp 2u, the reciprocal and multiply 2u, the sum's rounding u:
// (6 + 2|x - max|)u relative.
TEST_P(OpsTest, SoftmaxMatchesDouble) {
  std::mt19937 rng(6);
  for (int n : {1, 2, 9, 100, 1000, 32768}) {
    for (float sigma : {1.0f, 30.0f, 1e4f}) {
      std::vector<float> x = RandomVector(&rng, n, sigma);
      std::vector<float> y = x;
      ops().softmax(y.data(), n);
      double max = -INFINITY, sum = 0;
      for (float v : x) max = std::fmax(max, v);
      for (float v : x) sum += std::exp(v - max);
      double total = 0;
      for (int i = 0; i < n; ++i) {
        const double want = std::exp(x[i] - max) / sum;
        const double tol = (6 + 2 * std::fabs(x[i] - max)) * kU * want + 1e-44;
        ASSERT_NEAR(y[i], want, tol) << n << " " << sigma << " " << i;
        total += y[i];
      }
      EXPECT_NEAR(total, 1.0, (n + 8) * kU);
    }
  }
}

// axpy: the AVX2 table fuses a*x + y (one rounding) where the scalar rounds twice, so both are
// within 2u (|a x| + |y|) of exact, and 4u (...) of each other.
TEST_P(OpsTest, AxpyMatchesScalarAndDouble) {
  std::mt19937 rng(7);
  ForLengthsAndOffsets([&](int n, int off) {
    std::vector<float> x = RandomVector(&rng, n + off, 1.0f);
    std::vector<float> y0 = RandomVector(&rng, n + off, 1.0f);
    const float a = 0.37f + static_cast<float>(n);
    std::vector<float> y = y0, want = y0;
    ops().axpy(a, x.data() + off, y.data() + off, n);
    ref().axpy(a, x.data() + off, want.data() + off, n);
    for (int i = 0; i < off; ++i) ASSERT_EQ(y[i], y0[i]);
    for (int i = off; i < n + off; ++i) {
      const double mag = std::fabs(double{a} * x[i]) + std::fabs(y0[i]);
      ASSERT_NEAR(y[i], want[i], 4 * kU * mag);
      ASSERT_NEAR(y[i], double{y0[i]} + double{a} * x[i], 2 * kU * mag);
    }
  });
}

// dot: any float summation order is within (n + 1)u sum|x y| of exact (the standard gamma_n
// bound); the scalar table sums in double and is within u of exact.
TEST_P(OpsTest, DotMatchesScalarAndDouble) {
  std::mt19937 rng(8);
  ForLengthsAndOffsets([&](int n, int off) {
    std::vector<float> x = RandomVector(&rng, n + off, 1.0f);
    std::vector<float> y = RandomVector(&rng, n + off, 1.0f);
    double exact = 0, mag = 0;
    for (int i = off; i < n + off; ++i) {
      exact += double{x[i]} * y[i];
      mag += std::fabs(double{x[i]} * y[i]);
    }
    const float got = ops().dot(x.data() + off, y.data() + off, n);
    const float want = ref().dot(x.data() + off, y.data() + off, n);
    ASSERT_NEAR(got, exact, (n + 1) * kU * mag) << n;
    ASSERT_NEAR(want, exact, 2 * kU * mag + kU * std::fabs(exact)) << n;
  });
}

std::string IsaParamName(const testing::TestParamInfo<Isa>& info) { return IsaName(info.param); }

INSTANTIATE_TEST_SUITE_P(AllIsas, OpsTest, testing::Values(Isa::kScalar, Isa::kAvx2), IsaParamName);

// ---------------------------------------------------------------------------------------------
// RoPE

// Direct rotation in double: pair i turns by pos * base^(-2i/rot_dim). x: (n_heads, head_dim).
std::vector<double> RopeDouble(const std::vector<float>& x, int n_heads, int head_dim, int rot_dim,
                               double pos, double base, RopeMode mode,
                               const float* factors = nullptr) {
  std::vector<double> y(x.begin(), x.end());
  for (int h = 0; h < n_heads; ++h) {
    for (int i = 0; i < rot_dim / 2; ++i) {
      const double theta =
          pos * std::pow(base, -2.0 * i / rot_dim) / (factors != nullptr ? factors[i] : 1.0);
      const int i0 = h * head_dim + (mode == RopeMode::kNeox ? i : 2 * i);
      const int i1 = i0 + (mode == RopeMode::kNeox ? rot_dim / 2 : 1);
      y[i0] = x[i0] * std::cos(theta) - x[i1] * std::sin(theta);
      y[i1] = x[i0] * std::sin(theta) + x[i1] * std::cos(theta);
    }
  }
  return y;
}

// Bound on the angle error of pair i at pos: ggml's recurrence theta *= theta_scale leaves
// theta_i with i + 1 roundings (plus powf's error on theta_scale, carried i times), so
// |d theta_i| <= (2i + 3) u |theta_i|; cosf/sinf and the rotation add 4u of the pair's size.
double AngleBound(int i, int rot_dim, double pos, double base) {
  return (2 * i + 3) * kU * std::fabs(pos * std::pow(base, -2.0 * i / rot_dim)) + 4 * kU;
}

// Element-wise bound for a rotation by the sum of the angle bounds `bounds` of each pair.
void ExpectRopeNear(const std::vector<float>& got, const std::vector<double>& want,
                    const std::vector<float>& x, int n_heads, int head_dim, int rot_dim,
                    RopeMode mode, const std::vector<double>& bounds, const std::string& what) {
  for (int h = 0; h < n_heads; ++h) {
    for (int i = 0; i < rot_dim / 2; ++i) {
      const int i0 = h * head_dim + (mode == RopeMode::kNeox ? i : 2 * i);
      const int i1 = i0 + (mode == RopeMode::kNeox ? rot_dim / 2 : 1);
      const double tol = bounds[i] * (std::fabs(x[i0]) + std::fabs(x[i1]));
      ASSERT_NEAR(got[i0], want[i0], tol) << what << " head " << h << " pair " << i;
      ASSERT_NEAR(got[i1], want[i1], tol) << what << " head " << h << " pair " << i;
    }
    for (int d = rot_dim; d < head_dim; ++d) {
      ASSERT_EQ(got[h * head_dim + d], x[h * head_dim + d]) << what << " unrotated dim " << d;
    }
  }
}

struct RopeShape {
  int head_dim;
  int rot_dim;
  RopeMode mode;
};

const RopeShape kRopeShapes[] = {
    {64, 64, RopeMode::kNormal},  {64, 64, RopeMode::kNeox},  {128, 128, RopeMode::kNeox},
    {128, 64, RopeMode::kNormal}, {128, 32, RopeMode::kNeox}, {256, 256, RopeMode::kNeox},
    {10, 6, RopeMode::kNormal},
};

std::string ShapeName(const RopeShape& s, int64_t pos) {
  return (s.mode == RopeMode::kNeox ? "neox " : "normal ") + std::to_string(s.head_dim) + "/" +
         std::to_string(s.rot_dim) + " pos " + std::to_string(pos);
}

// Every ISA's rotation kernel against the scalar one: all even rot_dims 0..130, both pairings,
// a head_dim with unrotated dims after rot_dim, pointers offset 0..7 floats. Each output is
// x0 c - x1 s (or x0 s + x1 c); fusing a multiply-add changes it by at most 2u (|x0 c| + |x1 s|).
TEST_P(OpsTest, RopeRotateMatchesScalar) {
  std::mt19937 rng(12);
  const int n_heads = 3;
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int rot_dim = 0; rot_dim <= kMaxLen; rot_dim += 2) {
      const int head_dim = rot_dim + 3;
      for (int off = 0; off <= kMaxOffset; ++off) {
        std::vector<float> buf = RandomVector(&rng, off + n_heads * head_dim, 1.0f);
        std::vector<float> c = RandomVector(&rng, rot_dim / 2 + 1, 1.0f);
        std::vector<float> sn = RandomVector(&rng, rot_dim / 2 + 1, 1.0f);
        std::vector<float> want = buf, got = buf;
        ref().rope_rotate(want.data() + off, n_heads, head_dim, rot_dim, c.data(), sn.data(), mode);
        ops().rope_rotate(got.data() + off, n_heads, head_dim, rot_dim, c.data(), sn.data(), mode);
        const int half = rot_dim / 2;
        for (int h = 0; h < n_heads; ++h) {
          const float* x = buf.data() + off + h * head_dim;
          for (int i = 0; i < half; ++i) {
            const int i0 = mode == RopeMode::kNeox ? i : 2 * i;
            const int i1 = mode == RopeMode::kNeox ? i + half : 2 * i + 1;
            const double mag = std::fabs(x[i0] * c[i]) + std::fabs(x[i1] * sn[i]) +
                               std::fabs(x[i0] * sn[i]) + std::fabs(x[i1] * c[i]);
            const size_t base = off + h * head_dim;
            ASSERT_NEAR(got[base + i0], want[base + i0], 2 * kU * mag) << rot_dim << " " << i;
            ASSERT_NEAR(got[base + i1], want[base + i1], 2 * kU * mag) << rot_dim << " " << i;
          }
          for (int d = rot_dim; d < head_dim; ++d) {
            ASSERT_EQ(got[off + h * head_dim + d], x[d]) << "unrotated dim " << d;
          }
        }
      }
    }
  }
}

TEST(Rope, MatchesDoubleRotation) {
  std::mt19937 rng(9);
  const int n_heads = 3;
  for (const RopeShape& s : kRopeShapes) {
    for (float base : {10000.0f, 1e6f}) {
      for (int64_t pos : {0, 1, 17, 1000, 8191, -1, -8191, 100000}) {
        std::vector<float> x = RandomVector(&rng, n_heads * s.head_dim, 1.0f);
        std::vector<float> y = x;
        Rope(y.data(), n_heads, s.head_dim, s.rot_dim, pos, base, s.mode);
        std::vector<double> bounds;
        for (int i = 0; i < s.rot_dim / 2; ++i) {
          bounds.push_back(AngleBound(i, s.rot_dim, pos, base));
        }
        ExpectRopeNear(y, RopeDouble(x, n_heads, s.head_dim, s.rot_dim, pos, base, s.mode), x,
                       n_heads, s.head_dim, s.rot_dim, s.mode, bounds, ShapeName(s, pos));
        if (pos == 0) {
          EXPECT_EQ(y, x);
        }

        RopeCache cache;
        InitRopeCache(pos, s.rot_dim, base, &cache);
        std::vector<float> z = x;
        RopeWithCache(z.data(), n_heads, s.head_dim, cache, s.mode);
        EXPECT_EQ(z, y) << "cache differs from Rope: " << ShapeName(s, pos);
      }
    }
  }
}

// Llama 3.1's frequency factors: pair i's angle divided by factors[i] (ggml_rope_ext's
// freq_factors), against the double rotation; the float angle's error is the recurrence's
// divided by the factor, plus one rounding of the division.
TEST(Rope, FrequencyFactorsDivideEachPairsAngle) {
  std::mt19937 rng(11);
  const int n_heads = 3;
  for (const RopeShape& s : kRopeShapes) {
    std::vector<float> factors;
    for (int i = 0; i < s.rot_dim / 2; ++i) factors.push_back(1.0f + 7.0f * i / (s.rot_dim / 2));
    for (int64_t pos : {0, 1, 17, 1000, 8191, -8191, 100000}) {
      std::vector<float> x = RandomVector(&rng, n_heads * s.head_dim, 1.0f);
      std::vector<float> y = x;
      Rope(y.data(), n_heads, s.head_dim, s.rot_dim, pos, 500000.0f, s.mode, factors.data());
      std::vector<double> bounds;
      for (int i = 0; i < s.rot_dim / 2; ++i) {
        bounds.push_back(AngleBound(i, s.rot_dim, pos, 500000.0) / factors[i] + 4 * kU);
      }
      ExpectRopeNear(y,
                     RopeDouble(x, n_heads, s.head_dim, s.rot_dim, pos, 500000.0, s.mode,
                                factors.data()),
                     x, n_heads, s.head_dim, s.rot_dim, s.mode, bounds, ShapeName(s, pos));
      RopeCache cache;
      InitRopeCache(pos, s.rot_dim, 500000.0f, &cache, factors.data());
      std::vector<float> z = x;
      RopeWithCache(z.data(), n_heads, s.head_dim, cache, s.mode);
      EXPECT_EQ(z, y) << "cache differs from Rope: " << ShapeName(s, pos);
      // Linear scaling on top: every angle times the scale.
      std::vector<float> scaled = x;
      Rope(scaled.data(), n_heads, s.head_dim, s.rot_dim, pos, 500000.0f, s.mode, factors.data(),
           {.freq_scale = 0.125f, .ext_factor = 0.0f, .corr_low = 0.0f, .corr_high = 0.0f});
      std::vector<double> scaled_bounds;
      for (double b : bounds) scaled_bounds.push_back(0.125 * b + 2 * kU);
      ExpectRopeNear(scaled,
                     RopeDouble(x, n_heads, s.head_dim, s.rot_dim, 0.125 * pos, 500000.0, s.mode,
                                factors.data()),
                     x, n_heads, s.head_dim, s.rot_dim, s.mode, scaled_bounds, ShapeName(s, pos));
      if (pos != 0 && s.rot_dim > 2) {  // the factors change every pair but the first
        std::vector<float> plain = x;
        Rope(plain.data(), n_heads, s.head_dim, s.rot_dim, pos, 500000.0f, s.mode);
        EXPECT_NE(plain, y);
      }
    }
  }
}

// YaRN (the YaRN paper's "NTK-by-parts" with ggml's ramp): pair i turns by
// pos * theta_i * (s (1 - g_i) + g_i), g_i = 1 - clamp((i - low) / (high - low), 0, 1): the pairs
// below low keep their angle, those above high are interpolated by s, those between are mixed.
// Checked against the double rotation with that per-pair stretch, which is linear in pos (so
// rotations still compose); the magnitude of InitRopeCache scales the rotated dims only.
TEST(Rope, YarnMixesExtrapolationAndInterpolationPerPair) {
  std::mt19937 rng(12);
  const int n_heads = 2;
  const RopeScaling yarn{.freq_scale = 0.25f, .ext_factor = 1.0f, .corr_low = 2.0f,
                         .corr_high = 6.0f};
  for (const RopeShape& s : kRopeShapes) {
    std::vector<float> inverse_stretch;  // as frequency factors: the angle divided by them
    for (int i = 0; i < s.rot_dim / 2; ++i) {
      const double g = 1.0 - std::clamp((i - 2.0) / 4.0, 0.0, 1.0);
      inverse_stretch.push_back(static_cast<float>(1.0 / (0.25 * (1.0 - g) + g)));
    }
    for (int64_t pos : {1, 17, 1000, -8191, 100000}) {
      std::vector<float> x = RandomVector(&rng, n_heads * s.head_dim, 1.0f);
      std::vector<float> y = x;
      Rope(y.data(), n_heads, s.head_dim, s.rot_dim, pos, 10000.0f, s.mode, nullptr, yarn);
      std::vector<double> bounds;
      for (int i = 0; i < s.rot_dim / 2; ++i) {
        bounds.push_back(AngleBound(i, s.rot_dim, pos, 10000.0) + 8 * kU * std::fabs(pos));
      }
      ExpectRopeNear(y,
                     RopeDouble(x, n_heads, s.head_dim, s.rot_dim, pos, 10000.0, s.mode,
                                inverse_stretch.data()),
                     x, n_heads, s.head_dim, s.rot_dim, s.mode, bounds, ShapeName(s, pos));
      RopeCache cache;
      InitRopeCache(pos, s.rot_dim, 10000.0f, &cache, nullptr, yarn, 1.5f);
      std::vector<float> z = x;
      RopeWithCache(z.data(), n_heads, s.head_dim, cache, s.mode);
      for (int h = 0; h < n_heads; ++h) {
        for (int d = 0; d < s.head_dim; ++d) {
          const size_t j = static_cast<size_t>(h) * s.head_dim + d;
          const bool rotated = d < s.rot_dim;  // either mode rotates dims 0..rot_dim-1
          EXPECT_NEAR(z[j], rotated ? 1.5f * y[j] : x[j], 4 * kU * 1.5 * (std::fabs(y[j]) + 1))
              << ShapeName(s, pos) << " dim " << d;
        }
      }
    }
  }
}

// Rope(a) then Rope(b) == Rope(a + b) within the angle bounds of all three rotations.
TEST(Rope, Composes) {
  std::mt19937 rng(10);
  const int n_heads = 2;
  const int64_t pairs[][2] = {{1000, 24}, {8191, -100}, {5, 8186}, {-8191, 8191}, {3, 4}};
  for (const RopeShape& s : kRopeShapes) {
    for (const auto& ab : pairs) {
      const float base = 10000.0f;
      std::vector<float> x = RandomVector(&rng, n_heads * s.head_dim, 1.0f);
      std::vector<float> twice = x, once = x;
      Rope(twice.data(), n_heads, s.head_dim, s.rot_dim, ab[0], base, s.mode);
      Rope(twice.data(), n_heads, s.head_dim, s.rot_dim, ab[1], base, s.mode);
      Rope(once.data(), n_heads, s.head_dim, s.rot_dim, ab[0] + ab[1], base, s.mode);
      std::vector<double> bounds;
      for (int i = 0; i < s.rot_dim / 2; ++i) {
        bounds.push_back(AngleBound(i, s.rot_dim, ab[0], base) +
                         AngleBound(i, s.rot_dim, ab[1], base) +
                         AngleBound(i, s.rot_dim, ab[0] + ab[1], base));
      }
      ExpectRopeNear(twice, std::vector<double>(once.begin(), once.end()), x, n_heads, s.head_dim,
                     s.rot_dim, s.mode, bounds, ShapeName(s, ab[0] + ab[1]));
    }
  }
}

// Rope(p) then Rope(-p) is the identity up to rounding: the angles of -p are exactly the
// negated angles of p, so only cos^2 + sin^2 != 1 and the rotations' roundings remain: 8u.
TEST(Rope, NegativePositionUndoes) {
  std::mt19937 rng(11);
  const int n_heads = 4;
  for (const RopeShape& s : kRopeShapes) {
    for (int64_t pos : {1, 1000, 8191, 123456}) {
      std::vector<float> x = RandomVector(&rng, n_heads * s.head_dim, 1.0f);
      std::vector<float> y = x;
      Rope(y.data(), n_heads, s.head_dim, s.rot_dim, pos, 10000.0f, s.mode);
      Rope(y.data(), n_heads, s.head_dim, s.rot_dim, -pos, 10000.0f, s.mode);
      ExpectRopeNear(y, std::vector<double>(x.begin(), x.end()), x, n_heads, s.head_dim, s.rot_dim,
                     s.mode, std::vector<double>(s.rot_dim / 2, 8 * kU), ShapeName(s, pos));
    }
  }
}

}  // namespace
}  // namespace kvmem::kernels
