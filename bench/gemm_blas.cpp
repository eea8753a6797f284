// Would a BLAS speed up prefill? Times kvmem's MatMul against OpenBLAS on the weight matrices of
// one SmolLM2-135M layer (Q4_1) and, separately, its LM head (Q8_0, one token):
//   a  kvmem MatMul, weights packed for the AVX-512 VNNI kernels (activations quantized to int8);
//   b  kvmem MatMul, weights as GGUF stores them (AVX2 vec_dot path);
//   c  cblas_sgemm on the weights dequantized to f32 once beforehand (BLAS's best case: 4 bytes a
//      weight resident); cblas_sgemv at one token;
//   d  c plus dequantizing the weights inside the timed region, what an engine that keeps
//      quantized weights pays per micro-batch (ggml's BLAS backend converts this way).
// Each variant is timed in blocks of `reps` after a warm-up; the blocks are repeated `rounds`
// times over all shapes so a burst of other load on the machine does not fall on one variant
// only. GFLOP/s = 2 n_in n_out tokens / time, from the best and the median sample.
// "err" is max |a - c| / max |c| over three tokens' rows (b for a where a is not run): kvmem
// quantizes activations to 8 bits, BLAS does not, so ~1e-2 means both computed the same product.
//
// Usage: gemm_blas_bench [--threads T] [--tokens N] [--reps R] [--rounds K] [IN:OUT[:q8_0] ...]
// Shapes given on the command line replace the default layer (Q4_1 unless `:q8_0`).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/packed_matrix.h"
#include "kernels/type_traits.h"

// Declared by OpenBLAS's cblas.h, but not by the reference one the alternative may point at.
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);

namespace kvmem::kernels {
namespace {

struct Shape {
  std::string name;
  int64_t n_in;
  int64_t n_out;
  DType type;
};

enum Variant { kPacked, kUnpacked, kBlas, kDequantBlas, kVariants };

// One shape at one token count: its weights in every form, activations, outputs, and the
// samples (seconds) taken so far for each variant.
struct Case {
  Shape shape;
  int64_t n_tokens = 0;
  std::vector<uint8_t> bytes;  // (n_out, row_bytes), quantized from N(0, 0.05^2)
  WeightMatrix matrix;         // unpacked
  std::unique_ptr<PackedMatrix> packed;
  WeightMatrix packed_matrix;       // matrix with .packed set; only when `packed` is
  std::vector<float> wf, wd;        // (n_out, n_in): dequantized once; dequantized in (d)
  std::vector<float> x;             // (n_tokens, n_in)
  std::vector<float> y[kVariants];  // (n_tokens, n_out)
  std::vector<double> samples[kVariants];
};

// W (n_out, n_in) to f32 on the pool, from the unpacked source.
void Dequantize(const WeightMatrix& w, float* out, ThreadPool* pool) {
  pool->ParallelFor(w.n_out, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) DequantizeRow(w, r, out + r * w.n_in);
  });
}

std::unique_ptr<Case> MakeCase(const Shape& s, int64_t n_tokens, ThreadPool* pool,
                               std::mt19937& rng) {
  size_t row_bytes = 0;
  if (!RowBytes(s.type, s.n_in, &row_bytes)) {
    std::fprintf(stderr, "%s: n_in %lld is not a multiple of the block size\n", s.name.c_str(),
                 static_cast<long long>(s.n_in));
    std::exit(2);
  }
  auto c = std::make_unique<Case>();
  c->shape = s;
  c->n_tokens = n_tokens;
  c->bytes.resize(row_bytes * s.n_out);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(s.n_in);
  for (int64_t r = 0; r < s.n_out; ++r) {
    for (float& v : row) v = 0.05f * normal(rng);
    GetTypeTraits(s.type)->from_float(row.data(), c->bytes.data() + r * row_bytes, s.n_in);
  }
  c->matrix = {s.type, c->bytes.data(), s.n_in, s.n_out, row_bytes};
  if (PackedKernelsEnabled() && CanPack(s.type)) c->packed = Pack(c->matrix);
  c->packed_matrix = c->matrix;
  c->packed_matrix.packed = c->packed.get();
  c->wf.resize(s.n_out * s.n_in);
  c->wd.resize(c->wf.size());
  Dequantize(c->matrix, c->wf.data(), pool);
  c->x.resize(n_tokens * s.n_in);
  for (float& v : c->x) v = normal(rng);
  for (auto& y : c->y) y.resize(n_tokens * s.n_out);
  return c;
}

// y (n_tokens, n_out) = x (n_tokens, n_in) . W^T with W (n_out, n_in) row-major.
void Blas(const float* wf, int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens,
          float* y) {
  if (n_tokens == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n_out, n_in, 1.0f, wf, n_in, x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_tokens, n_out, n_in, 1.0f, x, n_in, wf,
                n_in, 0.0f, y, n_out);
  }
}

void Run(Case& c, Variant v, ThreadPool* pool) {
  const int64_t n_in = c.shape.n_in, n_out = c.shape.n_out;
  switch (v) {
    case kPacked:
      MatMul(c.packed_matrix, c.x.data(), c.n_tokens, c.y[v].data(), pool);
      break;
    case kUnpacked:
      MatMul(c.matrix, c.x.data(), c.n_tokens, c.y[v].data(), pool);
      break;
    case kBlas:
      Blas(c.wf.data(), n_in, n_out, c.x.data(), c.n_tokens, c.y[v].data());
      break;
    case kDequantBlas:
      Dequantize(c.matrix, c.wd.data(), pool);
      Blas(c.wd.data(), n_in, n_out, c.x.data(), c.n_tokens, c.y[v].data());
      break;
    case kVariants:
      break;
  }
}

// One block of `reps` samples per variant, each block after 30 ms of warm-up calls.
void Sample(Case& c, int reps, ThreadPool* pool) {
  // OpenBLAS's workers spin for 2^28 cycles (~0.1 s, by default) after a call before they sleep:
  // left spinning, they would take cores from kvmem's pool (OPENBLAS_THREAD_TIMEOUT shortens it).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int v = 0; v < kVariants; ++v) {
    if (v == kPacked && c.packed == nullptr) continue;
    // Warm-up: caches, and the pool's threads back to spinning after the pause.
    const auto warm_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
    do {
      Run(c, Variant(v), pool);
    } while (std::chrono::steady_clock::now() < warm_end);
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      Run(c, Variant(v), pool);
      const auto t1 = std::chrono::steady_clock::now();
      c.samples[v].push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  }
}

struct Timing {
  double best = 0;    // seconds; 0 if not measured
  double median = 0;  // seconds
};

struct Result {
  Timing t[kVariants];
  double err = 0;
};

// max |a - c| / max |c| over the rows of the first, middle and last tokens.
double RelErr(const std::vector<float>& a, const std::vector<float>& c, int64_t n_tokens,
              int64_t n_out) {
  double worst = 0;
  for (int64_t t : {int64_t{0}, n_tokens / 2, n_tokens - 1}) {
    double diff = 0, mag = 0;
    for (int64_t i = t * n_out; i < (t + 1) * n_out; ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - c[i]));
      mag = std::max(mag, std::fabs(static_cast<double>(c[i])));
    }
    worst = std::max(worst, diff / mag);
  }
  return worst;
}

Result Summarize(const Case& c) {
  Result r;
  for (int v = 0; v < kVariants; ++v) {
    std::vector<double> s = c.samples[v];
    if (s.empty()) continue;
    std::sort(s.begin(), s.end());
    r.t[v] = {s.front(), s[s.size() / 2]};
  }
  const Variant kvmem = c.packed != nullptr ? kPacked : kUnpacked;
  r.err = RelErr(c.y[kvmem], c.y[kBlas], c.n_tokens, c.shape.n_out);
  return r;
}

void PrintHeader() {
  std::printf("%-6s %-12s %-5s %6s | %15s %15s %15s %15s | %6s %6s | %7s\n", "shape",
              "n_in x n_out", "type", "tokens", "a kvmem packed", "b kvmem AVX2", "c sgemm f32",
              "d deq+sgemm", "a/c", "a/d", "err");
}

void PrintRow(const std::string& name, const std::string& dims, const char* type, int64_t tokens,
              double flop, const Result& r) {
  auto cell = [&](const Timing& x) -> std::string {
    if (x.best == 0) return "n/a";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f (%.1f)", flop / x.best * 1e-9, flop / x.median * 1e-9);
    return buf;
  };
  auto ratio = [&](Variant v) -> std::string {
    if (r.t[kPacked].best == 0) return "n/a";
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.2f", r.t[v].best / r.t[kPacked].best);
    return buf;
  };
  std::printf("%-6s %-12s %-5s %6lld | %15s %15s %15s %15s | %6s %6s | %7.1e\n", name.c_str(),
              dims.c_str(), type, static_cast<long long>(tokens), cell(r.t[kPacked]).c_str(),
              cell(r.t[kUnpacked]).c_str(), cell(r.t[kBlas]).c_str(),
              cell(r.t[kDequantBlas]).c_str(), ratio(kBlas).c_str(), ratio(kDequantBlas).c_str(),
              r.err);
}

double Flop(const Case& c) { return 2.0 * c.shape.n_in * c.shape.n_out * c.n_tokens; }

void PrintCase(const Case& c, const Result& r) {
  const std::string dims = std::to_string(c.shape.n_in) + "x" + std::to_string(c.shape.n_out);
  PrintRow(c.shape.name, dims, DTypeName(c.shape.type), c.n_tokens, Flop(c), r);
}

int Main(int argc, char** argv) {
  int threads = 2, reps = 5, rounds = 6;
  int64_t tokens = 512;
  std::vector<Shape> layer;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    long long in = 0, out = 0;
    if (i + 1 < argc && arg == "--threads") {
      threads = std::atoi(argv[++i]);
    } else if (i + 1 < argc && arg == "--tokens") {
      tokens = std::atoll(argv[++i]);
    } else if (i + 1 < argc && arg == "--reps") {
      reps = std::atoi(argv[++i]);
    } else if (i + 1 < argc && arg == "--rounds") {
      rounds = std::atoi(argv[++i]);
    } else if (std::sscanf(arg.c_str(), "%lld:%lld", &in, &out) == 2 && in > 0 && out > 0) {
      const bool q8 = arg.find(":q8_0") != std::string::npos;
      layer.push_back({"arg", in, out, q8 ? DType::kQ8_0 : DType::kQ4_1});
    } else {
      std::fprintf(stderr,
                   "usage: %s [--threads T] [--tokens N] [--reps R] [--rounds K] "
                   "[IN:OUT[:q8_0] ...]\n",
                   argv[0]);
      return 2;
    }
  }
  if (threads < 1 || tokens < 1 || reps < 1 || rounds < 1) {
    std::fprintf(stderr, "--threads, --tokens, --reps and --rounds must be positive\n");
    return 2;
  }
  const bool default_layer = layer.empty();
  if (default_layer) {  // SmolLM2-135M: d_model 576, 9 query / 3 KV heads of 64, FFN 1536
    const DType q = DType::kQ4_1;
    layer = {{"q", 576, 576, q},    {"k", 576, 192, q},     {"v", 576, 192, q},
             {"o", 576, 576, q},    {"gate", 576, 1536, q}, {"up", 576, 1536, q},
             {"down", 1536, 576, q}};
  }

  openblas_set_num_threads(threads);
  ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::vector<std::unique_ptr<Case>> cases;
  for (const Shape& s : layer) cases.push_back(MakeCase(s, tokens, &pool, rng));
  if (default_layer) {  // the LM head runs on the last token only
    cases.push_back(MakeCase({"head", 576, 49152, DType::kQ8_0}, 1, &pool, rng));
  }
  for (int round = 0; round < rounds; ++round) {
    for (auto& c : cases) Sample(*c, reps, &pool);
  }

  std::printf("threads %d | tokens %lld | %d x %d samples | kvmem %s%s | OpenBLAS core %s\n",
              threads, static_cast<long long>(tokens), rounds, reps, IsaName(ActiveIsa()),
              PackedKernelsEnabled() ? " + AVX-512 VNNI packed" : "", openblas_get_corename());
  std::printf("GFLOP/s from the best (median) sample; a/c, a/d: how many times faster a is\n");
  PrintHeader();
  Result total;
  double total_flop = 0;
  for (size_t i = 0; i < layer.size(); ++i) {
    const Result r = Summarize(*cases[i]);
    PrintCase(*cases[i], r);
    for (int v = 0; v < kVariants; ++v) {
      total.t[v].best += r.t[v].best;
      total.t[v].median += r.t[v].median;
    }
    total.err = std::max(total.err, r.err);
    total_flop += Flop(*cases[i]);
  }
  PrintRow("layer", "(sum)", "", tokens, total_flop, total);
  if (default_layer) PrintCase(*cases.back(), Summarize(*cases.back()));
  return 0;
}

}  // namespace
}  // namespace kvmem::kernels

int main(int argc, char** argv) { return kvmem::kernels::Main(argc, argv); }
