// BlockMaxDot (kernels/block_max_dot.h), every ISA against a double-precision maximum of the dot
// products computed directly: block sizes 8/16/32 (AVX2) and 5 (scalar only), partial last blocks,
// key strides wider than a row, dims that are and are not multiples of 8, row counts around the
// AVX2 tile of 4, sub-ranges of blocks, and blocks whose every dot is negative. Error bound per
// output: dim * u * max |x_d k_d| summed (float summation of dim products), u = 2^-24, times 2.
#include "kernels/block_max_dot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace kvmem::kernels {
namespace {

struct Case {
  int64_t n_rows;
  int dim;
  int64_t n_keys;
  int block_size;
  int64_t stride_pad;  // key_stride = dim + pad
  float shift;         // added to every key: shift < 0 with x > 0 makes every dot negative
};

void Check(const Case& c, Isa isa, std::mt19937* rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t stride = c.dim + c.stride_pad;
  std::vector<float> x(c.n_rows * c.dim), keys(c.n_keys * stride);
  for (float& v : x) v = c.shift < 0 ? std::fabs(dist(*rng)) : dist(*rng);
  for (float& v : keys) v = dist(*rng) + c.shift;
  const int64_t n_blocks = (c.n_keys + c.block_size - 1) / c.block_size;
  for (const auto& [b0, b1] :
       {std::pair<int64_t, int64_t>{0, n_blocks}, {n_blocks / 2, n_blocks}}) {
    const float sentinel = 12345.0f;  // outside [b0, b1) nothing is written
    std::vector<float> out(c.n_rows * (n_blocks + 3), sentinel);
    const int64_t out_stride = n_blocks + 3;
    BlockMaxDot(x.data(), c.n_rows, c.dim, keys.data(), stride, c.n_keys, c.block_size, b0, b1,
                out.data(), out_stride, isa);
    for (int64_t r = 0; r < c.n_rows; ++r) {
      for (int64_t b = 0; b < out_stride; ++b) {
        const float got = out[r * out_stride + b];
        if (b < b0 || b >= b1) {
          ASSERT_EQ(got, sentinel) << "row " << r << " block " << b;
          continue;
        }
        double want = -INFINITY, bound = 0;
        for (int64_t i = b * c.block_size; i < std::min(c.n_keys, (b + 1) * c.block_size); ++i) {
          double dot = 0, mag = 0;
          for (int d = 0; d < c.dim; ++d) {
            dot += double(x[r * c.dim + d]) * keys[i * stride + d];
            mag += std::fabs(double(x[r * c.dim + d]) * keys[i * stride + d]);
          }
          want = std::max(want, dot);
          bound = std::max(bound, 2.0 * c.dim * mag / 16777216.0);
        }
        ASSERT_NEAR(got, want, bound) << IsaName(isa) << " row " << r << " block " << b;
        if (c.shift < 0) {
          ASSERT_LT(got, 0.0f);
        }
      }
    }
  }
}

TEST(BlockMaxDot, MatchesDirectMaxOfDotsOnEveryIsa) {
  std::mt19937 rng(11);
  const Case cases[] = {
      {9, 64, 16 * 7 + 3, 16, 128, 0.0f},  // SmolLM2-like: 3 KV heads of 64 (stride 192)
      {4, 256, 16 * 5, 16, 0, 0.0f},       // Gemma-like head_dim 256
      {1, 64, 8 * 9 + 1, 8, 0, 0.0f},      // a last block of one key
      {7, 24, 32 * 3 + 17, 32, 8, 0.0f},   // dim not a multiple of 16
      {5, 20, 40, 8, 0, 0.0f},             // dim not a multiple of 8
      {3, 64, 53, 5, 0, 0.0f},             // a block size only the scalar path takes
      {6, 64, 16 * 4, 16, 0, -3.0f},       // every dot negative
      {2, 600, 40, 8, 0, 0.0f},            // dim above the AVX2 kernel's: scalar
  };
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    if (!CpuSupports(isa)) continue;
    for (const Case& c : cases) {
      SCOPED_TRACE(testing::Message() << "rows " << c.n_rows << " dim " << c.dim << " keys "
                                      << c.n_keys << " bs " << c.block_size);
      Check(c, isa, &rng);
    }
  }
}

}  // namespace
}  // namespace kvmem::kernels
