// How fast is decode attention per KV row? Times the grouped kernel (kernels::AttendPartial: the
// query heads of one KV head over the same rows, what a decode step at depth runs) on one
// thread, over `heads` KV heads of `rows` rows each, in the 256-row chunks the transformer block
// gives it (model/transformer_block.cpp). With 90 heads of 8192 rows (SmolLM2's 30 layers x 3 KV
// heads at depth 8192) the rows do not fit in cache, as in a real decode step; with --heads 1
// they do. Time is the thread's CPU time, so other load on the machine slows it less than wall
// time; run under `perf stat -e instructions` for a noise-free count (bench/README.md).
//
// Usage: attention_bench [--ctk f16|q8_0] [--ctv f16|q8_0] [--heads H] [--rows N] [--group G]
//                        [--head-dim D] [--reps R]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention.h"
#include "thread_time.h"

namespace kvmem::kernels {
namespace {

using bench::ThreadSeconds;

// Random rows of a storage type: f16 values in [-2, 2), or q8_0 blocks with random codes and
// scales in [0.005, 0.02).
void FillRows(bool q8, int head_dim, int64_t n_rows, std::mt19937* rng, std::vector<uint8_t>* out) {
  const size_t row_bytes = q8 ? static_cast<size_t>(head_dim / 32) * 34 : 2 * head_dim;
  out->resize(row_bytes * n_rows);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f), scale(0.005f, 0.02f);
  std::uniform_int_distribution<int> code(-127, 127);
  uint8_t* p = out->data();
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int d = 0; d < head_dim; d += q8 ? 32 : 1) {
      if (q8) {
        const uint16_t s = F32ToF16(scale(*rng));
        std::memcpy(p, &s, 2);
        for (int i = 0; i < 32; ++i)
          p[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(code(*rng)));
        p += 34;
      } else {
        const uint16_t h = F32ToF16(value(*rng));
        std::memcpy(p, &h, 2);
        p += 2;
      }
    }
  }
}

int Main(int argc, char** argv) {
  std::string ctk = "q8_0", ctv = "q8_0";
  int heads = 90, group = 3, head_dim = 64, reps = 5;
  int64_t rows = 8192;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v == nullptr) {
      std::fprintf(stderr, "attention_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--ctk")
      ctk = v;
    else if (a == "--ctv")
      ctv = v;
    else if (a == "--heads")
      heads = std::atoi(v);
    else if (a == "--rows")
      rows = std::atoll(v);
    else if (a == "--group")
      group = std::atoi(v);
    else if (a == "--head-dim")
      head_dim = std::atoi(v);
    else if (a == "--reps")
      reps = std::atoi(v);
    else {
      std::fprintf(stderr, "attention_bench: unknown option %s\n", a.c_str());
      return 2;
    }
    ++i;
  }
  const bool k8 = ctk == "q8_0", v8 = ctv == "q8_0";
  if ((!k8 && ctk != "f16") || (!v8 && ctv != "f16") || heads < 1 || rows < 1 || group < 1 ||
      reps < 1) {
    std::fprintf(stderr, "attention_bench: bad arguments (formats f16|q8_0, counts >= 1)\n");
    return 2;
  }
  const KvLayout layout{k8 ? KType::kQ8_0 : KType::kF16, v8 ? VType::kQ8_0 : VType::kF16, head_dim};
  if (!AttendPartialSupported(layout)) {
    std::fprintf(stderr, "attention_bench: no grouped kernel for this layout on this CPU\n");
    return 1;
  }
  std::mt19937 rng(7);
  std::vector<std::vector<uint8_t>> k(heads), v(heads);
  for (int h = 0; h < heads; ++h) {
    FillRows(k8, head_dim, rows, &rng, &k[h]);
    FillRows(v8, head_dim, rows, &rng, &v[h]);
  }
  std::vector<float> q(static_cast<size_t>(group) * head_dim);
  std::normal_distribution<float> normal;
  for (float& x : q) x = normal(rng);
  std::vector<float> acc(q.size()), m(group), l(group);
  constexpr int64_t kChunkRows = 256;
  const int64_t k_bytes = static_cast<int64_t>(KRowBytes(layout.k, head_dim));
  const int64_t v_bytes = static_cast<int64_t>(VRowBytes(layout.v, head_dim));
  double checksum = 0;
  std::vector<double> ns_per_row;
  for (int r = 0; r < reps; ++r) {
    const double t0 = ThreadSeconds();
    for (int h = 0; h < heads; ++h) {
      for (int64_t c = 0; c < rows; c += kChunkRows) {
        KvSpan span;
        span.k = k[h].data() + c * k_bytes;
        span.v = v[h].data() + c * v_bytes;
        span.n_rows = std::min(kChunkRows, rows - c);
        span.k_stride = k_bytes;
        span.v_stride = v_bytes;
        AttendPartial(q.data(), group, layout, &span, 1, 0.125f, acc.data(), m.data(), l.data());
        checksum += acc[0] / l[0];
      }
    }
    ns_per_row.push_back(1e9 * (ThreadSeconds() - t0) / (static_cast<double>(heads) * rows));
  }
  std::sort(ns_per_row.begin(), ns_per_row.end());
  std::printf(
      "attention_bench K %s V %s head_dim %d group %d: %d heads x %lld rows, "
      "%.2f ns/row (min of %d), median %.2f; %.1f MB of KV (checksum %.6g)\n",
      ctk.c_str(), ctv.c_str(), head_dim, group, heads, static_cast<long long>(rows),
      ns_per_row.front(), reps, ns_per_row[ns_per_row.size() / 2],
      1e-6 * static_cast<double>(heads) * rows * (k_bytes + v_bytes), checksum);
  return 0;
}

}  // namespace
}  // namespace kvmem::kernels

int main(int argc, char** argv) { return kvmem::kernels::Main(argc, argv); }
