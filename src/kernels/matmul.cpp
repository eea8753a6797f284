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
void PackedMatMul(const PackedMatrix& m, const float* x, int64_t n_tokens, float* y,
                  ThreadPool* pool, Isa isa) {
  const TypeTraits& at = TraitsOrDie(m.act_type(), isa);
  size_t act_row_bytes = 0;
  const bool row_ok = RowBytes(m.act_type(), m.n_in(), &act_row_bytes);
  assert(row_ok);
  (void)row_ok;
  const size_t stride = PackedActStride(m.n_in());
  thread_local std::vector<uint8_t> planes;
  planes.resize(static_cast<size_t>(n_tokens) * stride + 64);
  uint8_t* base = planes.data() + (64 - reinterpret_cast<uintptr_t>(planes.data()) % 64) % 64;
  auto convert = [&](int64_t t0, int64_t t1) {
    thread_local std::vector<uint8_t> quantized;
    quantized.resize(act_row_bytes);
    for (int64_t t = t0; t < t1; ++t) {
      at.from_float(x + t * m.n_in(), quantized.data(), m.n_in());
      SplitActivations(m.act_type(), quantized.data(), m.n_in(), base + t * stride);
    }
  };
  const PackedActs acts{base, stride, m.n_in()};
  auto groups = [&](int64_t g0, int64_t g1) {
    avx512::PackedMatMulGroups(m, acts, n_tokens, g0, g1, y, m.n_out());
  };
  if (pool != nullptr) {
    if (n_tokens > 1) {
      pool->ParallelFor(n_tokens, 1, convert);
    } else {
      convert(0, n_tokens);
    }
    pool->ParallelFor(m.n_groups(), GroupGrain(m.n_groups(), pool->size()), groups);
  } else {
    convert(0, n_tokens);
    groups(0, m.n_groups());
  }
}
#endif

}  // namespace

void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool,
            Isa isa) {
  if (n_tokens <= 0 || w.n_out <= 0) return;
#if defined(__x86_64__)
  if (w.packed != nullptr && isa != Isa::kScalar && PackedKernelsEnabled()) {
    PackedMatMul(*w.packed, x, n_tokens, y, pool, isa);
    return;
  }
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

void DequantizeRow(const WeightMatrix& w, int64_t row, float* out, Isa isa) {
  if (w.packed != nullptr) return w.packed->DequantizeRow(row, out);  // the same values
  const TypeTraits& t = TraitsOrDie(w.type, isa);
  const auto* data = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
  t.to_float(data, out, w.n_in);
}

}  // namespace kvmem::kernels
