// Quantization kernels: every AVX2 kernel against the scalar reference (all lengths 0..8 blocks,
// misaligned buffers, random and extreme inputs), dequantization and quantization against the
// `gguf` Python package's goldens (tests/data/quant, scripts/make_quant_vectors.py), code fixed
// points and a named round-trip error budget per format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/quant_blocks.h"
#include "kernels/type_traits.h"
#include "quant_test_util.h"

namespace kvmem::kernels {
namespace {

using quant_testing::AllTypes;
using quant_testing::BlockSize;
using quant_testing::Buffer;
using quant_testing::Dequantize;
using quant_testing::DotMagnitude;
using quant_testing::Fill;
using quant_testing::FillBlocks;
using quant_testing::FloatBuffer;
using quant_testing::Role;
using quant_testing::RowSize;
using quant_testing::RunnableIsas;
using quant_testing::Traits;

constexpr float kEps = std::numeric_limits<float>::epsilon();
constexpr size_t kByteOffsets[] = {0, 1, 2, 3, 5, 7, 13, 31};
constexpr Fill kFills[] = {Fill::kRandom, Fill::kZeros, Fill::kMaxCodes, Fill::kMinCodes};

// Every length from 0 to 8 blocks; element-wise types get every length 0..70 (all SIMD tails)
// and a few longer ones.
std::vector<int64_t> Lengths(DType t) {
  std::vector<int64_t> out;
  const int64_t bs = BlockSize(t);
  if (bs == 1) {
    for (int64_t n = 0; n <= 70; ++n) out.push_back(n);
    for (int64_t n : {127, 128, 129, 255, 256, 257, 1000}) out.push_back(n);
  } else {
    for (int64_t b = 0; b <= 8; ++b) out.push_back(b * bs);
  }
  return out;
}

bool HasAvx2() { return RunnableIsas().size() > 1; }

// Float inputs for the quantizers: random at many magnitudes, and the shapes that stress their
// rounding and sign choices. All finite and normal (or zero).
std::vector<std::vector<float>> QuantizerInputs(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> cases;
  for (float scale : {1e-30f, 1e-3f, 1.0f, 1e3f, 1e30f}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng) * scale;
    cases.push_back(x);
  }
  cases.emplace_back(static_cast<size_t>(n), 0.0f);
  cases.emplace_back(static_cast<size_t>(n), -0.75f);
  std::vector<float> ties(static_cast<size_t>(n));  // half-integer steps once amax = 127
  for (int64_t i = 0; i < n; ++i)
    ties[i] = (i % 32 == 0) ? 127.0f : static_cast<float>(i % 64) - 31.5f;
  cases.push_back(ties);
  std::vector<float> signs(static_cast<size_t>(n));  // +-amax in every block, + first
  for (int64_t i = 0; i < n; ++i)
    signs[i] = (i % 32 == 3) ? 4.0f : (i % 32 == 9) ? -4.0f : normal(rng);
  cases.push_back(signs);
  std::vector<float> outlier(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) outlier[i] = (i % 97 == 5) ? -1e4f : normal(rng);
  cases.push_back(outlier);
  return cases;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<float> AsFloats(const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

DType TypeByName(const std::string& name) {
  for (DType t : AllTypes()) {
    if (name == DTypeName(t)) return t;
  }
  ADD_FAILURE() << "unknown type " << name;
  return DType::kF32;
}

// ---- Structure --------------------------------------------------------------------------------

TEST(QuantBlocks, SizesMatchDTypeTable) {
  const struct {
    DType type;
    size_t size;
    int64_t elements;
  } cases[] = {
      {DType::kQ4_0, sizeof(BlockQ4_0), kQK4_0}, {DType::kQ4_1, sizeof(BlockQ4_1), kQK4_1},
      {DType::kQ5_0, sizeof(BlockQ5_0), kQK5_0}, {DType::kQ5_1, sizeof(BlockQ5_1), kQK5_0},
      {DType::kQ8_0, sizeof(BlockQ8_0), kQK8_0}, {DType::kQ8_1, sizeof(BlockQ8_1), kQK8_1},
      {DType::kQ2_K, sizeof(BlockQ2_K), kQK_K},  {DType::kQ3_K, sizeof(BlockQ3_K), kQK_K},
      {DType::kQ4_K, sizeof(BlockQ4_K), kQK_K},  {DType::kQ5_K, sizeof(BlockQ5_K), kQK_K},
      {DType::kQ6_K, sizeof(BlockQ6_K), kQK_K},  {DType::kQ8_K, sizeof(BlockQ8_K), kQK_K},
  };
  for (const auto& c : cases) {
    ASSERT_NE(GetDTypeInfo(c.type), nullptr);
    EXPECT_EQ(GetDTypeInfo(c.type)->type_size, c.size) << DTypeName(c.type);
    EXPECT_EQ(GetDTypeInfo(c.type)->block_size, c.elements) << DTypeName(c.type);
  }
}

TEST(TypeTraits, EveryIsaTableCoversTheReferenceTable) {
  for (Isa isa : RunnableIsas()) {
    for (DType t : AllTypes()) {
      const TypeTraits* ref = GetTypeTraits(t, Isa::kScalar);
      const TypeTraits* got = GetTypeTraits(t, isa);
      ASSERT_NE(ref, nullptr) << DTypeName(t);
      ASSERT_NE(got, nullptr) << DTypeName(t) << " " << IsaName(isa);
      EXPECT_EQ(got->type, t);
      EXPECT_EQ(got->vec_dot_type, ref->vec_dot_type) << DTypeName(t);
      EXPECT_NE(got->to_float, nullptr) << DTypeName(t);
      EXPECT_EQ(got->from_float == nullptr, ref->from_float == nullptr) << DTypeName(t);
      EXPECT_EQ(got->vec_dot == nullptr, ref->vec_dot == nullptr) << DTypeName(t);
      if (got->vec_dot != nullptr) {
        // Activations must be producible in the pairing format.
        EXPECT_NE(Traits(got->vec_dot_type, isa).from_float, nullptr) << DTypeName(t);
      }
    }
  }
  EXPECT_EQ(GetTypeTraits(static_cast<DType>(4), Isa::kScalar), nullptr);  // Q4_2: retired id
}

// ---- AVX2 against the scalar reference --------------------------------------------------------

// Dequantization is bit-identical across ISAs (each value is one multiply, then one add).
TEST(QuantAvx2, ToFloatMatchesScalarBitForBit) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937 rng(1);
  for (DType t : AllTypes()) {
    const TypeTraits& ref = Traits(t, Isa::kScalar);
    const TypeTraits& vec = Traits(t, Isa::kAvx2);
    for (int64_t n : Lengths(t)) {
      for (Fill fill : kFills) {
        for (size_t off : kByteOffsets) {
          Buffer src(RowSize(t, n), off);
          FillBlocks(t, n, fill, rng, src.data());
          FloatBuffer a(static_cast<size_t>(n), off % 8);
          FloatBuffer b(static_cast<size_t>(n), (off + 3) % 8);
          ref.to_float(src.data(), a.data(), n);
          vec.to_float(src.data(), b.data(), n);
          ASSERT_EQ(std::memcmp(a.data(), b.data(), static_cast<size_t>(n) * sizeof(float)), 0)
              << DTypeName(t) << " n=" << n << " offset=" << off;
          ASSERT_TRUE(b.GuardIntact()) << DTypeName(t) << " n=" << n;
        }
      }
    }
  }
}

// ggml's AVX2 Q8_0/Q8_1 quantizer, written out: d = amax/127, codes round_half_even(x*(127/amax)).
void ExpectGgmlAvx2Q8(DType t, const float* x, const uint8_t* ref, const uint8_t* got, int64_t n) {
  const size_t block_bytes = GetDTypeInfo(t)->type_size;
  const size_t codes_at = t == DType::kQ8_0 ? offsetof(BlockQ8_0, qs) : offsetof(BlockQ8_1, qs);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    const uint8_t* rb = ref + b * block_bytes;
    const uint8_t* gb = got + b * block_bytes;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float mul = amax != 0.0f ? 127.0f / amax : 0.0f;
    ASSERT_EQ(std::memcmp(rb, gb, 2), 0) << "d differs in block " << b;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const auto code = static_cast<int8_t>(gb[codes_at + j]);
      const auto ref_code = static_cast<int8_t>(rb[codes_at + j]);
      EXPECT_EQ(code, static_cast<int>(std::nearbyint(xb[j] * mul))) << "block " << b << " j=" << j;
      EXPECT_LE(std::abs(code - ref_code), 1) << "block " << b << " j=" << j;
      sum += code;
    }
    if (t == DType::kQ8_1) {
      uint16_t s;
      std::memcpy(&s, gb + offsetof(BlockQ8_1, s), 2);
      EXPECT_EQ(s, F32ToF16(amax / 127.0f * static_cast<float>(sum))) << "block " << b;
    }
  }
}

// Quantizers agree byte for byte, except Q8_0/Q8_1, whose AVX2 rounding is ggml's AVX2 rounding
// (checked exactly against a scalar transcription; codes within 1 of the reference's).
TEST(QuantAvx2, FromFloatMatchesScalar) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937 rng(2);
  for (DType t : AllTypes()) {
    const TypeTraits& ref = Traits(t, Isa::kScalar);
    const TypeTraits& vec = Traits(t, Isa::kAvx2);
    if (ref.from_float == nullptr) continue;
    for (int64_t n : Lengths(t)) {
      for (const std::vector<float>& x : QuantizerInputs(n, rng)) {
        for (size_t off : {size_t{0}, size_t{1}, size_t{7}, size_t{31}}) {
          FloatBuffer in(static_cast<size_t>(n), off % 8);
          if (n > 0) std::memcpy(in.data(), x.data(), x.size() * sizeof(float));
          Buffer a(RowSize(t, n), off);
          Buffer b(RowSize(t, n), (off + 5) % 32);
          ref.from_float(in.data(), a.data(), n);
          vec.from_float(in.data(), b.data(), n);
          ASSERT_TRUE(b.GuardIntact()) << DTypeName(t) << " n=" << n;
          if (t == DType::kQ8_0 || t == DType::kQ8_1) {
            ExpectGgmlAvx2Q8(t, in.data(), a.data(), b.data(), n);
          } else {
            ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0)
                << DTypeName(t) << " n=" << n << " offset=" << off;
          }
        }
      }
    }
  }
}

// Tolerance of a dot product, relative to DotMagnitude: the integer paths sum exact integers per
// block, so only the per-block float scaling and accumulation round (1e-5 is far above that);
// the float paths accumulate every product in float: 4 eps per step of the longest accumulation
// chain (n/32 vector steps + a tail of up to 31 + the reduction).
double DotTolerance(DType t, int64_t n) {
  if (BlockSize(t) > 1) return 1e-5;
  return 4.0 * kEps * (static_cast<double>(n) / 32.0 + 40.0);
}

TEST(QuantAvx2, VecDotMatchesScalar) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937 rng(3);
  const std::pair<size_t, size_t> offsets[] = {{0, 0}, {1, 3}, {7, 30}, {13, 1}, {31, 17}};
  for (DType t : AllTypes()) {
    const TypeTraits& ref = Traits(t, Isa::kScalar);
    const TypeTraits& vec = Traits(t, Isa::kAvx2);
    if (ref.vec_dot == nullptr) continue;
    const DType yt = ref.vec_dot_type;
    for (int64_t n : Lengths(t)) {
      for (Fill xfill : kFills) {
        for (Fill yfill : {Fill::kRandom, Fill::kMaxCodes, Fill::kMinCodes}) {
          for (auto [ox, oy] : offsets) {
            Buffer x(RowSize(t, n), ox);
            Buffer y(RowSize(yt, n), oy);
            FillBlocks(t, n, xfill, rng, x.data(), Role::kWeight);
            FillBlocks(yt, n, yfill, rng, y.data(), Role::kActivation);
            const float a = ref.vec_dot(n, x.data(), y.data());
            const float b = vec.vec_dot(n, x.data(), y.data());
            const double mag = DotMagnitude(t, x.data(), yt, y.data(), n);
            ASSERT_NEAR(a, b, DotTolerance(t, n) * mag + 1e-30)
                << DTypeName(t) << " n=" << n << " fills " << static_cast<int>(xfill) << ","
                << static_cast<int>(yfill) << " offsets " << ox << "," << oy;
          }
        }
      }
    }
  }
}

// ---- Goldens from the gguf Python package -----------------------------------------------------

struct GoldenCase {
  std::string kind;
  DType type;
  int64_t n;
  std::vector<uint8_t> input;
  std::vector<uint8_t> expected;
};

std::vector<GoldenCase> LoadGoldens() {
  const std::string dir = std::string(KVMEM_TESTDATA_DIR) + "/quant/";
  std::ifstream manifest(dir + "manifest.txt");
  EXPECT_TRUE(manifest.good()) << "missing " << dir << "manifest.txt";
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string kind, type, in_file, out_file;
    int64_t n = 0;
    fields >> kind >> type >> n >> in_file >> out_file;
    cases.push_back({kind, TypeByName(type), n, ReadFile(dir + in_file), ReadFile(dir + out_file)});
  }
  return cases;
}

// kvmem's dequantization equals gguf's bit for bit (not within an ulp: both compute each value
// with the same float multiply and add), for random blocks and for real model rows.
TEST(QuantGolden, DequantizeMatchesGgufPackage) {
  int checked = 0;
  for (const GoldenCase& c : LoadGoldens()) {
    if (c.kind != "dequant" && c.kind != "model") continue;
    ASSERT_EQ(c.input.size(), RowSize(c.type, c.n)) << DTypeName(c.type);
    const std::vector<float> want = AsFloats(c.expected);
    ASSERT_EQ(want.size(), static_cast<size_t>(c.n));
    for (Isa isa : RunnableIsas()) {
      for (size_t off : {size_t{0}, size_t{3}}) {
        Buffer src(c.input.size(), off);
        std::memcpy(src.data(), c.input.data(), c.input.size());
        std::vector<float> got(static_cast<size_t>(c.n));
        Traits(c.type, isa).to_float(src.data(), got.data(), c.n);
        for (int64_t i = 0; i < c.n; ++i) {
          ASSERT_EQ(F32ToBits(got[i]), F32ToBits(want[i]))
              << c.kind << " " << DTypeName(c.type) << " " << IsaName(isa) << " element " << i
              << ": " << got[i] << " vs gguf " << want[i];
        }
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 12);
}

// The reference quantizers reproduce gguf's (= ggml's *_ref) bytes exactly, ties and overflowing
// scales included. The AVX2 Q8_0 quantizer rounds as ggml's AVX2 code: same scale, codes within 1.
TEST(QuantGolden, QuantizeMatchesGgufPackage) {
  int checked = 0;
  for (const GoldenCase& c : LoadGoldens()) {
    if (c.kind != "quant") continue;
    const std::vector<float> x = AsFloats(c.input);
    ASSERT_EQ(x.size(), static_cast<size_t>(c.n));
    ASSERT_EQ(c.expected.size(), RowSize(c.type, c.n));
    for (Isa isa : RunnableIsas()) {
      std::vector<uint8_t> got(c.expected.size());
      Traits(c.type, isa).from_float(x.data(), got.data(), c.n);
      if (isa == Isa::kAvx2 && c.type == DType::kQ8_0) {
        ExpectGgmlAvx2Q8(c.type, x.data(), c.expected.data(), got.data(), c.n);
        continue;
      }
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], c.expected[i])
            << DTypeName(c.type) << " " << IsaName(isa) << " byte " << i << " (block "
            << i / GetDTypeInfo(c.type)->type_size << ")";
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 7);
}

// ---- Round trips ------------------------------------------------------------------------------

// Every code of the symmetric formats is a fixed point: dequantizing a block that uses all codes
// (including both extremes) and quantizing it again gives the same bytes.
TEST(QuantRoundTrip, EveryCodeIsAFixedPoint) {
  for (Isa isa : RunnableIsas()) {
    for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                    DType::kQ8_1, DType::kQ8_K}) {
      // Values on each format's grid: code * step (+ offset). The 32-element formats get every
      // code in every block; the 8-bit formats start each block with a +-127 code (which fixes
      // the step) and run through all 255 codes over the row.
      const int64_t bs = BlockSize(t);
      const int64_t n = (t == DType::kQ8_0 || t == DType::kQ8_1) ? 9 * bs : 2 * bs;
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = i / bs;
        const int64_t j = i % bs;
        switch (t) {
          case DType::kQ4_0:
            x[i] = static_cast<float>(j % 16 - 8) * 0.25f;
            break;
          case DType::kQ5_0:
            x[i] = static_cast<float>(j % 32 - 16) * 0.125f;
            break;
          case DType::kQ4_1:
            x[i] = static_cast<float>(j % 16) * 0.5f - 3.0f;
            break;
          case DType::kQ5_1:
            x[i] = static_cast<float>(j % 32) * 0.25f - 1.0f;
            break;
          default: {
            const int64_t code = j == 0 ? (b % 2 ? -127 : 127) : (b * 31 + j) % 255 - 127;
            x[i] = static_cast<float>(code) * 0.0625f;
          }
        }
      }
      const TypeTraits& tr = Traits(t, isa);
      std::vector<uint8_t> q(RowSize(t, n));
      tr.from_float(x.data(), q.data(), n);
      const std::vector<float> back = Dequantize(t, q.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(back[i], x[i]) << DTypeName(t) << " " << IsaName(isa) << " element " << i;
      }
      std::vector<uint8_t> q2(q.size());
      tr.from_float(back.data(), q2.data(), n);
      EXPECT_EQ(q, q2) << DTypeName(t) << " " << IsaName(isa);
    }
  }
}

// The error budget of one block of a format after quantize -> dequantize, from its block's float
// values; every bound is half a step (a full step where a symmetric format clamps its top code)
// plus what rounding the fp16 scale (and offset) to 11 bits can add.
double ErrorBudget(DType t, const float* x, int64_t count, int64_t i) {
  const double h = std::ldexp(1.0, -11);  // fp16 relative rounding
  double amax = 0.0, min = x[0], max = x[0];
  for (int64_t j = 0; j < count; ++j) {
    amax = std::max(amax, std::fabs(static_cast<double>(x[j])));
    min = std::min(min, static_cast<double>(x[j]));
    max = std::max(max, static_cast<double>(x[j]));
  }
  const double range = max - min;
  switch (t) {
    case DType::kF32:
      return 0.0;
    case DType::kF16:
      return std::fabs(x[i]) * h;
    case DType::kBF16:
      return std::fabs(x[i]) * std::ldexp(1.0, -8);
    case DType::kQ8_0:
    case DType::kQ8_1:  // half a step of amax/127, plus 127 * |fp16(d) - d|
      return amax / 254.0 + amax * h;
    case DType::kQ8_K:  // d stays a float
      return amax / 254.0 * (1.0 + 1e-6);
    case DType::kQ4_0:  // step amax/8; the code opposite the max clamps from 16 to 15
      return amax / 8.0 + 8.0 * (amax / 8.0) * h;
    case DType::kQ5_0:
      return amax / 16.0 + 16.0 * (amax / 16.0) * h;
    case DType::kQ4_1:  // half a step of range/15, plus 15 |delta d| + |delta m|
      return range / 30.0 + range * h + std::fabs(min) * h;
    case DType::kQ5_1:
      return range / 62.0 + range * h + std::fabs(min) * h;
    default:
      ADD_FAILURE() << "no budget for " << DTypeName(t);
      return 0.0;
  }
}

TEST(QuantRoundTrip, ErrorWithinBudget) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(-2.0f, 3.0f);
  for (Isa isa : RunnableIsas()) {
    for (DType t : AllTypes()) {
      const TypeTraits& tr = Traits(t, isa);
      if (tr.from_float == nullptr) continue;
      const int64_t bs = std::max<int64_t>(BlockSize(t), 32);
      const int64_t n = 16 * bs;
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t b = 0; b < n / bs; ++b) {
        // Block magnitudes 1e-2..1e3 keep fp16 scales normal; some blocks are offset or skewed.
        const float scale = std::pow(10.0f, log_mag(rng));
        const float shift = (b % 3 == 1) ? 3.0f * scale : 0.0f;
        for (int64_t j = 0; j < bs; ++j) x[b * bs + j] = normal(rng) * scale + shift;
        if (b % 4 == 2) x[b * bs + b % bs] = 20.0f * scale;  // an outlier
      }
      std::vector<uint8_t> q(RowSize(t, n));
      tr.from_float(x.data(), q.data(), n);
      const std::vector<float> back = Dequantize(t, q.data(), n);
      const int64_t group = BlockSize(t);
      double worst = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t start = i - i % group;
        const double budget = ErrorBudget(t, x.data() + start, group, i - start);
        const double err = std::fabs(static_cast<double>(back[i]) - x[i]);
        ASSERT_LE(err, budget * (1.0 + 1e-5) + 1e-30)
            << DTypeName(t) << " " << IsaName(isa) << " element " << i << " x=" << x[i];
        if (budget > 0) worst = std::max(worst, err / budget);
      }
      // The budgets are tight: a quarter of them is reached somewhere (except exact F32).
      if (t != DType::kF32) {
        EXPECT_GT(worst, 0.25) << DTypeName(t) << " " << IsaName(isa);
      }
    }
  }
}

}  // namespace
}  // namespace kvmem::kernels
