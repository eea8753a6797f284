// How much does kernels::BlockMaxDot save over scoring blocks with a plain matrix product? Times,
// on one thread, MemArt's exact block scores (BlockScore::kExact) for one layer's KV head both
// ways: kernels::MatMul of the query rows with every key (F32 rows, one dot product each) then a
// maximum per block, as BlockExactScores did before, against BlockMaxDot; prints both and their
// ratio, measured in the same run. Defaults: SmolLM2's geometry (3 KV heads of 64, 36 query
// tokens x 3 heads per KV head) over a 15,000-token history, BS 16.
//
// Usage: block_max_dot_bench [--rows R] [--dim D] [--kv-heads H] [--keys N] [--bs B] [--reps N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/block_max_dot.h"
#include "kernels/matmul.h"
#include "thread_time.h"

namespace kvmem::kernels {
namespace {

using bench::ThreadSeconds;

int Main(int argc, char** argv) {
  int64_t rows = 108, keys = 15000, kv_heads = 3, reps = 5;
  int dim = 64, bs = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const long long v = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rows")) rows = v;
    else if (!std::strcmp(argv[i], "--dim")) dim = static_cast<int>(v);
    else if (!std::strcmp(argv[i], "--kv-heads")) kv_heads = v;
    else if (!std::strcmp(argv[i], "--keys")) keys = v;
    else if (!std::strcmp(argv[i], "--bs")) bs = static_cast<int>(v);
    else if (!std::strcmp(argv[i], "--reps")) reps = v;
    else return std::fprintf(stderr, "unknown option %s\n", argv[i]), 2;
  }
  if (rows < 1 || dim < 1 || kv_heads < 1 || keys < 1 || bs < 1 || reps < 1) {
    return std::fprintf(stderr, "every option must be positive\n"), 2;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  std::vector<float> x(rows * dim), k(keys * kv_heads * dim), y(rows * keys);
  for (float& v : x) v = dist(rng);
  for (float& v : k) v = dist(rng);
  const int64_t n_blocks = (keys + bs - 1) / bs;
  std::vector<float> by_matmul(rows * n_blocks), by_kernel(rows * n_blocks);
  WeightMatrix w;
  w.type = DType::kF32;
  w.data = k.data();
  w.n_in = dim;
  w.n_out = keys;
  w.row_bytes = static_cast<size_t>(kv_heads * dim) * sizeof(float);
  double t_matmul = 1e30, t_kernel = 1e30;
  for (int64_t r = 0; r < reps; ++r) {
    double t0 = ThreadSeconds();
    MatMul(w, x.data(), rows, y.data(), nullptr);
    std::fill(by_matmul.begin(), by_matmul.end(), -INFINITY);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < keys; ++j) {
        float& o = by_matmul[i * n_blocks + j / bs];
        o = std::fmax(o, y[i * keys + j]);
      }
    }
    t_matmul = std::min(t_matmul, ThreadSeconds() - t0);
    t0 = ThreadSeconds();
    BlockMaxDot(x.data(), rows, dim, k.data(), kv_heads * dim, keys, bs, 0, n_blocks,
                by_kernel.data(), n_blocks);
    t_kernel = std::min(t_kernel, ThreadSeconds() - t0);
  }
  double worst = 0;
  for (size_t i = 0; i < by_kernel.size(); ++i) {
    worst = std::max(worst, std::fabs(double(by_kernel[i]) - by_matmul[i]));
  }
  std::printf("rows %lld x keys %lld x dim %d, bs %d, %s, best of %lld, thread CPU time\n",
              static_cast<long long>(rows), static_cast<long long>(keys), dim, bs,
              IsaName(ActiveIsa()), static_cast<long long>(reps));
  std::printf("MatMul then max per block  %8.2f ms\n", 1e3 * t_matmul);
  std::printf("BlockMaxDot                %8.2f ms\n", 1e3 * t_kernel);
  std::printf("ratio (MatMul / BlockMaxDot) %.2fx, largest difference %.2e\n", t_matmul / t_kernel,
              worst);
  return 0;
}

}  // namespace
}  // namespace kvmem::kernels

int main(int argc, char** argv) { return kvmem::kernels::Main(argc, argv); }
