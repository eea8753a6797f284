#include "kernels/matmul.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <vector>

#include "core/log.h"
#include "kernels/packed_internal.h"
#include "kernels/type_traits.h"

namespace kvmem::kernels {
namespace {

// Tokens handled together against each weight row: the row is read from cache once per tile
// while the tile's activation rows stay in L1.
constexpr int64_t kTokenTile = 4;

// Output rows per ParallelFor chunk: about four chunks per thread for balance, at least 16 rows so
// a chunk is worth handing out, at most 64 so its weights stay cache-resident across token tiles.
int64_t RowGrain(int64_t n_out, int n_threads) {
  return std::clamp<int64_t>(n_out / (4 * static_cast<int64_t>(n_threads)), 16, 64);
}

// Weight types reach here only after the model loader accepted them, so a missing kernel is a
// programming error.
const TypeTraits& TraitsOrDie(DType type, Isa isa) {
  const TypeTraits* t = GetTypeTraits(type, isa);
  if (t == nullptr) {
    KVMEM_LOG_ERROR("no %s kernels for type %s", IsaName(isa), DTypeName(type));
    std::abort();
  }
  return *t;
}

// Groups of 16 rows per ParallelFor chunk: about four chunks per thread, at most 16 groups.
int64_t GroupGrain(int64_t n_groups, int n_threads) {
  return std::clamp<int64_t>(n_groups / (4 * static_cast<int64_t>(n_threads)), 1, 16);
}

#if defined(__x86_64__)
// y_j = x . W_j^T for packed matrices that share x (same n_in and activation type): x is
// quantized once, and one ParallelFor hands out the groups of all of them.
void PackedMatMuls(std::span<const MatMulOut> outs, const float* x, int64_t n_tokens,
                   ThreadPool* pool, Isa isa) {
  const PackedMatrix& first = *outs[0].w->packed;
  const TypeTraits& at = TraitsOrDie(first.act_type(), isa);
  size_t act_row_bytes = 0;
  const bool row_ok = RowBytes(first.act_type(), first.n_in(), &act_row_bytes);
  assert(row_ok);
  (void)row_ok;
  const size_t stride = PackedActStride(first.n_in());
  thread_local std::vector<uint8_t> planes;
  planes.resize(static_cast<size_t>(n_tokens) * stride + 64);
  uint8_t* base = planes.data() + (64 - reinterpret_cast<uintptr_t>(planes.data()) % 64) % 64;
  auto convert = [&](int64_t t0, int64_t t1) {
    thread_local std::vector<uint8_t> quantized;
    quantized.resize(act_row_bytes);
    for (int64_t t = t0; t < t1; ++t) {
      at.from_float(x + t * first.n_in(), quantized.data(), first.n_in());
      SplitActivations(first.act_type(), quantized.data(), first.n_in(), base + t * stride);
    }
  };
  const PackedActs acts{base, stride, first.n_in()};
  int64_t total = 0;
  for (const MatMulOut& o : outs) total += o.w->packed->n_groups();
  auto groups = [&](int64_t g0, int64_t g1) {
    int64_t start = 0;  // first group of matrix j in the concatenation
    for (const MatMulOut& o : outs) {
      const PackedMatrix& m = *o.w->packed;
      const int64_t lo = std::max(g0, start), hi = std::min(g1, start + m.n_groups());
      if (lo < hi) {
        avx512::PackedMatMulGroups(m, acts, n_tokens, lo - start, hi - start, o.y, m.n_out());
      }
      start += m.n_groups();
    }
  };
  if (pool != nullptr) {
    if (n_tokens > 1) {
      pool->ParallelFor(n_tokens, 1, convert);
    } else {
      convert(0, n_tokens);
    }
    pool->ParallelFor(total, GroupGrain(total, pool->size()), groups);
  } else {
    convert(0, n_tokens);
    groups(0, total);
  }
}

// Whether PackedMatMuls can take all of outs.
bool PackedTogether(std::span<const MatMulOut> outs, Isa isa) {
  if (isa == Isa::kScalar || !PackedKernelsEnabled()) return false;
  for (const MatMulOut& o : outs) {
    if (o.w->packed == nullptr || o.w->packed->n_in() != outs[0].w->packed->n_in() ||
        o.w->packed->act_type() != outs[0].w->packed->act_type()) {
      return false;
    }
  }
  return true;
}
#endif

}  // namespace

void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool,
            Isa isa) {
  if (n_tokens <= 0 || w.n_out <= 0) return;
#if defined(__x86_64__)
  const MatMulOut out{&w, y};
  if (PackedTogether({&out, 1}, isa)) return PackedMatMuls({&out, 1}, x, n_tokens, pool, isa);
#endif
  const TypeTraits& wt = TraitsOrDie(w.type, isa);
  const TypeTraits& at = TraitsOrDie(wt.vec_dot_type, isa);
  assert(wt.vec_dot != nullptr);

  // Activations in vec_dot_type: (n_tokens, act_row_bytes). F32 weights use x as it is.
  size_t act_row_bytes = 0;
  const bool row_ok = RowBytes(wt.vec_dot_type, w.n_in, &act_row_bytes);
  assert(row_ok);
  (void)row_ok;
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  if (wt.vec_dot_type != DType::kF32) {
    // Owned by the calling thread; workers only read it while ParallelFor runs.
    thread_local std::vector<uint8_t> scratch;
    scratch.resize(static_cast<size_t>(n_tokens) * act_row_bytes);
    uint8_t* out = scratch.data();
    auto convert = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        at.from_float(x + t * w.n_in, out + t * act_row_bytes, w.n_in);
      }
    };
    if (pool != nullptr && n_tokens > 1) {
      pool->ParallelFor(n_tokens, 1, convert);
    } else {
      convert(0, n_tokens);
    }
    act = out;
  }

  const auto* weights = static_cast<const uint8_t*>(w.data);
  const VecDotFn vec_dot = wt.vec_dot;
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
      const int64_t t1 = std::min(n_tokens, t0 + kTokenTile);
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = weights + r * static_cast<int64_t>(w.row_bytes);
        for (int64_t t = t0; t < t1; ++t) {
          y[t * w.n_out + r] = vec_dot(w.n_in, row, act + t * static_cast<int64_t>(act_row_bytes));
        }
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(w.n_out, RowGrain(w.n_out, pool->size()), rows);
  } else {
    rows(0, w.n_out);
  }
}

void MatMuls(std::span<const MatMulOut> outs, const float* x, int64_t n_tokens, ThreadPool* pool,
             Isa isa) {
  if (outs.empty() || n_tokens <= 0) return;
#if defined(__x86_64__)
  if (PackedTogether(outs, isa)) return PackedMatMuls(outs, x, n_tokens, pool, isa);
#endif
  for (const MatMulOut& o : outs) MatMul(*o.w, x, n_tokens, o.y, pool, isa);
}

void DequantizeRow(const WeightMatrix& w, int64_t row, float* out, Isa isa) {
  if (w.packed != nullptr) return w.packed->DequantizeRow(row, out);  // the same values
  const TypeTraits& t = TraitsOrDie(w.type, isa);
  const auto* data = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
  t.to_float(data, out, w.n_in);
}

}  // namespace kvmem::kernels
