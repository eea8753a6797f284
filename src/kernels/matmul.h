// Weight-matrix times activations, for any weight type in kernels/type_traits.h. Activations are
// converted once per token to the weight type's vec_dot_type, then every output row is a VecDot,
// or, for weights repacked at load (kernels/packed_matrix.h), 16 rows at a time by VNNI kernels.
// Work is split across the pool by output rows; within a chunk of rows, tokens are taken a few at a
// time so each weight row is read once per token tile. The converted activations live in a
// thread_local scratch buffer of the calling thread. n_in must be a multiple of the weight type's
// and its vec_dot_type's block size (the model loader checks this).
// Thread-safe if pools are not shared concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/packed_matrix.h"

namespace kvmem::kernels {

// A row-major matrix as GGUF stores it: n_out rows of n_in elements of `type`.
struct WeightMatrix {
  DType type = DType::kF32;
  const void* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  size_t row_bytes = 0;
  // The same weights repacked for the AVX-512 VNNI kernels, owned by whoever packed them (the
  // model); MatMul uses it when PackedKernelsEnabled() and the ISA is not scalar.
  const PackedMatrix* packed = nullptr;
};

// y(n_tokens, n_out) = x(n_tokens, n_in) . W^T. `pool` may be nullptr (single thread).
void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool,
            Isa isa = ActiveIsa());

// One product of MatMuls: y(n_tokens, w->n_out) = x . W^T.
struct MatMulOut {
  const WeightMatrix* w;
  float* y;
};

// Several matrices applied to the same x (n_tokens, n_in), e.g. Q, K and V: the same results as
// one MatMul each, but with packed weights x is quantized once and one parallel loop covers the
// rows of all of them (a decode step pays one hand-out and one wait instead of several).
void MatMuls(std::span<const MatMulOut> outs, const float* x, int64_t n_tokens, ThreadPool* pool,
             Isa isa = ActiveIsa());

// One row of W, dequantized to floats (embedding lookup); from the packed copy when there is one
// (bit-identical values), so a tied embedding table packed as the LM head is not read again.
void DequantizeRow(const WeightMatrix& w, int64_t row, float* out, Isa isa = ActiveIsa());

}  // namespace kvmem::kernels
