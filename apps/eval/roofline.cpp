#include "eval/roofline.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "core/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KVMEM_ROOFLINE_X86 1
#endif

namespace kvmem::eval {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kReadPasses = 5;
constexpr int kFmaRuns = 5;
// Per thread and run: 12 accumulators x 2^22 steps, ~8 ms at 2 FMA/cycle and 3 GHz.
constexpr int64_t kFmaSteps = int64_t{1} << 22;
constexpr int kAccumulators = 12;      // > latency x FMA ports (4 x 2) so the ports never wait
constexpr size_t kFloatsPerStep = 64;  // one read step: 8 AVX2 loads, 4 cache lines

// Sums of n floats (a multiple of kFloatsPerStep), to make the loads observable.
float SumScalar(const float* p, size_t n) {
  float acc[8] = {};
  for (size_t i = 0; i < n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
  }
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

// acc = acc * a + b converges to b / (1 - a) = 1: no overflow, no denormals.
float FmaScalar(int64_t steps) {
  float acc[kAccumulators];
  for (int k = 0; k < kAccumulators; ++k) acc[k] = static_cast<float>(k);
  for (int64_t i = 0; i < steps; ++i) {
    for (float& a : acc) a = a * 0.999f + 0.001f;
  }
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

#if KVMEM_ROOFLINE_X86
__attribute__((target("avx2,fma"))) float SumAvx2(const float* p, size_t n) {
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += kFloatsPerStep) {
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_load_ps(p + i + 8 * k));
  }
  for (int k = 1; k < 8; ++k) acc[0] = _mm256_add_ps(acc[0], acc[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

__attribute__((target("avx2,fma"))) float FmaAvx2(int64_t steps) {
  __m256 acc[kAccumulators];
  for (int k = 0; k < kAccumulators; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t i = 0; i < steps; ++i) {
    for (__m256& x : acc) x = _mm256_fmadd_ps(x, a, b);
  }
  for (int k = 1; k < kAccumulators; ++k) acc[0] = _mm256_add_ps(acc[0], acc[k]);
  return _mm256_cvtss_f32(acc[0]);
}

__attribute__((target("avx512f"))) float FmaAvx512(int64_t steps) {
  __m512 acc[kAccumulators];
  for (int k = 0; k < kAccumulators; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < steps; ++i) {
    for (__m512& x : acc) x = _mm512_fmadd_ps(x, a, b);
  }
  for (int k = 1; k < kAccumulators; ++k) acc[0] = _mm512_add_ps(acc[0], acc[k]);
  return _mm512_cvtss_f32(acc[0]);
}
#endif

using SumFn = float (*)(const float*, size_t);
using FmaFn = float (*)(int64_t);

struct Kernels {
  SumFn sum = SumScalar;
  FmaFn fma = FmaScalar;
  int fma_lanes = 1;
  const char* fma_isa = "scalar";
};

Kernels DetectKernels() {
  Kernels k;
#if KVMEM_ROOFLINE_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    k = {SumAvx2, FmaAvx2, 8, "avx2"};
  }
  if (__builtin_cpu_supports("avx512f")) {
    k.fma = FmaAvx512;
    k.fma_lanes = 16;
    k.fma_isa = "avx512f";
  }
#endif
  return k;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// The read probe's buffer, 64-byte aligned, split into one contiguous share per thread.
class ReadBuffer {
 public:
  explicit ReadBuffer(size_t bytes)
      : n_(std::max(bytes, kMiB) / sizeof(float) / kFloatsPerStep * kFloatsPerStep),
        data_(static_cast<float*>(std::aligned_alloc(64, n_ * sizeof(float)))) {}

  bool ok() const { return data_ != nullptr; }
  size_t bytes() const { return n_ * sizeof(float); }
  // [begin, end) of thread t of n, in floats, on step boundaries.
  std::pair<size_t, size_t> Share(int t, int n) const {
    const size_t steps = n_ / kFloatsPerStep;
    return {steps * t / n * kFloatsPerStep, steps * (t + 1) / n * kFloatsPerStep};
  }
  // Writes every page (an untouched page would read as the shared zero page).
  void Touch(ThreadPool* pool) {
    pool->Run([&](int t) {
      auto [b, e] = Share(t, pool->size());
      std::fill(data_.get() + b, data_.get() + e, 1.0f);
    });
  }
  const float* data() const { return data_.get(); }

 private:
  size_t n_;
  std::unique_ptr<float, FreeDeleter> data_;
};

double MeasureBandwidth(const ReadBuffer& buf, ThreadPool* pool, SumFn sum) {
  std::vector<float> sink(pool->size());
  double best = 0;
  for (int pass = 0; pass < kReadPasses; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    pool->Run([&](int t) {
      auto [b, e] = buf.Share(t, pool->size());
      sink[t] = sum(buf.data() + b, e - b);
    });
    best = std::max(best, buf.bytes() / Seconds(start) / 1e9);
  }
  volatile float keep = 0;
  for (float s : sink) keep = keep + s;
  return best;
}

double MeasureFmaPeak(ThreadPool* pool, const Kernels& k) {
  std::vector<float> sink(pool->size());
  double best = 0;
  for (int run = 0; run < kFmaRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    pool->Run([&](int t) { sink[t] = k.fma(kFmaSteps); });
    const double fmas = static_cast<double>(kFmaSteps) * kAccumulators * pool->size();
    best = std::max(best, 2.0 * fmas * k.fma_lanes / Seconds(start) / 1e9);
  }
  volatile float keep = 0;
  for (float s : sink) keep = keep + s;
  return best;
}

}  // namespace

size_t RooflineBufferBytes(size_t weight_bytes) { return std::max(512 * kMiB, 2 * weight_bytes); }

std::vector<Roofline> MeasureRooflines(const std::vector<int>& threads, size_t buffer_bytes) {
  const Kernels k = DetectKernels();
  ReadBuffer buf(buffer_bytes);
  std::vector<Roofline> out;
  bool touched = false;
  for (int n : threads) {
    ThreadPool pool(n);
    if (buf.ok() && !touched) {
      buf.Touch(&pool);
      touched = true;
    }
    out.push_back({n, buf.ok() ? MeasureBandwidth(buf, &pool, k.sum) : 0.0,
                   MeasureFmaPeak(&pool, k), k.fma_isa});
  }
  return out;
}

}  // namespace kvmem::eval
