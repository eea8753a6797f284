// MatMul against a naive reference for every weight type and ISA: W dequantized, activations
// quantized to the vec_dot_type exactly as MatMul does and dequantized, products summed in double.
// Any token count, 1 and 3 threads; the thread count must not change a single bit. Weights
// repacked for the AVX-512 VNNI kernels (kernels/packed_matrix.h) meet the same reference.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/type_traits.h"
#include "quant_test_util.h"

namespace kvmem::kernels {
namespace {

using quant_testing::AllTypes;
using quant_testing::BlockSize;
using quant_testing::Dequantize;
using quant_testing::Fill;
using quant_testing::FillBlocks;
using quant_testing::RowSize;
using quant_testing::RunnableIsas;
using quant_testing::Traits;
using quant_testing::WithoutMins;

struct Weights {
  std::vector<uint8_t> bytes;  // (n_out, row_bytes)
  WeightMatrix matrix;
  std::unique_ptr<PackedMatrix> packed;
};

Weights MakeWeights(DType t, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  Weights w;
  const size_t row_bytes = RowSize(t, n_in);
  w.bytes.resize(row_bytes * static_cast<size_t>(n_out));
  for (int64_t r = 0; r < n_out; ++r) {
    // Mostly random rows, some with extreme codes.
    const Fill fill = r % 7 == 3 ? Fill::kMaxCodes : r % 7 == 5 ? Fill::kMinCodes : Fill::kRandom;
    FillBlocks(t, n_in, fill, rng, w.bytes.data() + r * row_bytes);
  }
  w.matrix = {t, w.bytes.data(), n_in, n_out, row_bytes};
  return w;
}

// The same weights with a packed copy, or nullptr where this CPU or type has no packed kernels.
std::unique_ptr<Weights> MakePacked(const Weights& src) {
  if (!PackedKernelsEnabled() || !CanPack(src.matrix.type)) return nullptr;
  auto w = std::make_unique<Weights>();
  w->bytes = src.bytes;
  w->matrix = src.matrix;
  w->matrix.data = w->bytes.data();
  w->packed = Pack(w->matrix);
  w->matrix.packed = w->packed.get();
  return w;
}

// y_ref(t, r) = sum_i W[r, i] * xq[t, i] in double, where xq is x after the vec_dot_type round
// trip; `tol` receives each entry's allowed error (see DotTolerance in quant_test.cpp): 1e-5 of
// the magnitude for integer paths, the float-accumulation bound for float paths, plus 2^-9 of
// the min terms for Q8_1 pairings, whose block sums s are rounded to fp16.
void Reference(const Weights& w, const std::vector<float>& x, int64_t n_tokens, Isa isa,
               std::vector<double>* y_ref, std::vector<double>* tol) {
  const WeightMatrix& m = w.matrix;
  const TypeTraits& wt = Traits(m.type, isa);
  const DType at = wt.vec_dot_type;
  const int64_t n = m.n_in;
  const double eps = std::numeric_limits<float>::epsilon();
  const double rel =
      BlockSize(m.type) > 1 ? 1e-5 : 4.0 * eps * (static_cast<double>(n) / 32.0 + 40.0);
  y_ref->assign(static_cast<size_t>(n_tokens * m.n_out), 0.0);
  tol->assign(y_ref->size(), 0.0);
  std::vector<uint8_t> xq(RowSize(at, n));
  for (int64_t t = 0; t < n_tokens; ++t) {
    Traits(at, isa).from_float(x.data() + t * n, xq.data(), n);
    const std::vector<float> xd = Dequantize(at, xq.data(), n);
    for (int64_t r = 0; r < m.n_out; ++r) {
      const uint8_t* row = w.bytes.data() + r * m.row_bytes;
      const std::vector<float> wd = Dequantize(m.type, row, n);
      const std::vector<uint8_t> scaled_only = WithoutMins(m.type, row, n);
      const std::vector<float> w0 = Dequantize(m.type, scaled_only.data(), n);
      double sum = 0.0, mag = 0.0, min_mag = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double xv = xd[i];
        sum += static_cast<double>(wd[i]) * xv;
        const double min_part = std::fabs(static_cast<double>(wd[i]) - w0[i]);
        mag += (std::fabs(static_cast<double>(w0[i])) + min_part) * std::fabs(xv);
        min_mag += min_part * std::fabs(xv);
      }
      (*y_ref)[t * m.n_out + r] = sum;
      (*tol)[t * m.n_out + r] =
          rel * mag + (at == DType::kQ8_1 ? std::ldexp(min_mag, -9) : 0.0) + 1e-30;
    }
  }
}

TEST(MatMul, MatchesNaiveReferenceForEveryWeightType) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool3(3);
  for (Isa isa : RunnableIsas()) {
    for (DType t : AllTypes()) {
      if (Traits(t, isa).vec_dot == nullptr) continue;
      std::vector<int64_t> n_ins = {512};
      if (BlockSize(t) == 1) n_ins.push_back(77);  // element-wise types take any length
      for (int64_t n_in : n_ins) {
        const int64_t n_out = 37;  // two full groups of 16 and a partial one when packed
        const Weights w = MakeWeights(t, n_in, n_out, rng);
        const std::unique_ptr<Weights> packed = MakePacked(w);
        for (int64_t n_tokens : {1, 2, 3, 7, 33}) {
          std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
          for (float& v : x) v = normal(rng);
          std::vector<double> y_ref, tol;
          Reference(w, x, n_tokens, isa, &y_ref, &tol);
          std::vector<float> y1(y_ref.size(), std::nanf("")), y3(y_ref.size(), std::nanf(""));
          MatMul(w.matrix, x.data(), n_tokens, y1.data(), nullptr, isa);
          MatMul(w.matrix, x.data(), n_tokens, y3.data(), &pool3, isa);
          for (size_t i = 0; i < y_ref.size(); ++i) {
            ASSERT_NEAR(y1[i], y_ref[i], tol[i])
                << DTypeName(t) << " " << IsaName(isa) << " n_in=" << n_in
                << " n_tokens=" << n_tokens << " token " << i / n_out << " row " << i % n_out;
          }
          ASSERT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)), 0)
              << DTypeName(t) << " " << IsaName(isa) << ": thread count changed the result";
          if (packed == nullptr || isa == Isa::kScalar) continue;
          std::vector<float> p1(y_ref.size(), std::nanf("")), p3(y_ref.size(), std::nanf(""));
          MatMul(packed->matrix, x.data(), n_tokens, p1.data(), nullptr, isa);
          MatMul(packed->matrix, x.data(), n_tokens, p3.data(), &pool3, isa);
          for (size_t i = 0; i < y_ref.size(); ++i) {
            ASSERT_NEAR(p1[i], y_ref[i], tol[i])
                << "packed " << DTypeName(t) << " n_in=" << n_in << " n_tokens=" << n_tokens
                << " token " << i / n_out << " row " << i % n_out;
          }
          ASSERT_EQ(std::memcmp(p1.data(), p3.data(), p1.size() * sizeof(float)), 0)
              << "packed " << DTypeName(t) << ": thread count changed the result";
        }
      }
    }
  }
}

// Many rows (several ParallelFor chunks of uneven size), a one-thread pool, and the active ISA.
TEST(MatMul, ManyRowsAndPoolSizes) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Weights w = MakeWeights(DType::kQ4_1, 576, 1000, rng);
  std::vector<float> x(5 * 576);
  for (float& v : x) v = normal(rng);
  std::vector<float> expect(5 * 1000);
  MatMul(w.matrix, x.data(), 5, expect.data(), nullptr);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> y(expect.size(), std::nanf(""));
    MatMul(w.matrix, x.data(), 5, y.data(), &pool);
    EXPECT_EQ(std::memcmp(y.data(), expect.data(), y.size() * sizeof(float)), 0) << threads;
  }
  // Token t of a batch equals the same token alone.
  std::vector<float> one(1000);
  MatMul(w.matrix, x.data() + 3 * 576, 1, one.data(), nullptr);
  EXPECT_EQ(std::memcmp(one.data(), expect.data() + 3 * 1000, one.size() * sizeof(float)), 0);
}

TEST(MatMul, DequantizeRowMatchesToFloat) {
  std::mt19937 rng(13);
  for (Isa isa : RunnableIsas()) {
    for (DType t : AllTypes()) {
      if (Traits(t, isa).vec_dot == nullptr) continue;
      const Weights w = MakeWeights(t, 512, 5, rng);
      for (int64_t r = 0; r < 5; ++r) {
        std::vector<float> got(512);
        DequantizeRow(w.matrix, r, got.data(), isa);
        const std::vector<float> want = Dequantize(t, w.bytes.data() + r * w.matrix.row_bytes, 512);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), 512 * sizeof(float)), 0)
            << DTypeName(t) << " " << IsaName(isa) << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace kvmem::kernels

namespace kvmem::kernels {
namespace {

// The packed copy holds the source's values bit for bit (for Q4_0, d * q - 8 d is exact since
// d * (q - 8) is: an 11-bit d times a 5-bit integer), and so does DequantizeRow through it.
TEST(PackedMatrix, DequantizesToTheSourceValues) {
  if (!PackedKernelsEnabled()) GTEST_SKIP() << "no AVX-512 VNNI here";
  std::mt19937 rng(14);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ8_0, DType::kQ5_0,
                  DType::kQ6_K}) {
    const Weights w = MakeWeights(t, 512, 21, rng);
    const std::unique_ptr<PackedMatrix> p = Pack(w.matrix);
    ASSERT_NE(p, nullptr) << DTypeName(t);
    for (int64_t r = 0; r < 21; ++r) {
      std::vector<float> got(512);
      p->DequantizeRow(r, got.data());
      const std::vector<float> want = Dequantize(t, w.bytes.data() + r * w.matrix.row_bytes, 512);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), 512 * sizeof(float)), 0)
          << DTypeName(t) << " row " << r;
      WeightMatrix with_packed = w.matrix;
      with_packed.packed = p.get();
      DequantizeRow(with_packed, r, got.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), 512 * sizeof(float)), 0)
          << DTypeName(t) << " row " << r << " via DequantizeRow";
    }
  }
}

// A token computed with others (tiles of up to 4 share the weight loads) equals the token alone.
TEST(PackedMatrix, TokenAloneEqualsTokenInBatch) {
  if (!PackedKernelsEnabled()) GTEST_SKIP() << "no AVX-512 VNNI here";
  std::mt19937 rng(15);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType t : {DType::kQ4_1, DType::kQ6_K, DType::kQ8_0}) {
    const Weights src = MakeWeights(t, 768, 50, rng);
    const std::unique_ptr<Weights> w = MakePacked(src);
    ASSERT_NE(w, nullptr);
    const int64_t n_tokens = 9;
    std::vector<float> x(n_tokens * 768);
    for (float& v : x) v = normal(rng);
    std::vector<float> batch(n_tokens * 50);
    MatMul(w->matrix, x.data(), n_tokens, batch.data(), nullptr);
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
      std::vector<float> one(50);
      MatMul(w->matrix, x.data() + tok * 768, 1, one.data(), nullptr);
      EXPECT_EQ(std::memcmp(one.data(), batch.data() + tok * 50, 50 * sizeof(float)), 0)
          << DTypeName(t) << " token " << tok;
    }
  }
}

}  // namespace
}  // namespace kvmem::kernels
