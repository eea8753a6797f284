// Single-query attention over KV rows stored in F16, read through spans so a sequence's cache can
// be any list of row ranges of the block pool (kv/). Online (streaming) softmax in one pass, so
// no buffer of scores is needed. Thread-safe: pure functions.
#pragma once

#include <cstdint>

#include "kernels/cpu_features.h"

namespace kvmem::kernels {

// n_rows consecutive K and V rows of one KV head; row i of K starts at k + i * stride.
struct KvSpan {
  const uint16_t* k;  // (n_rows, head_dim) f16, row stride `stride` elements
  const uint16_t* v;  // (n_rows, head_dim) f16, row stride `stride` elements
  int64_t n_rows;
  int64_t stride;
};

// out = sum_j softmax_j(scale * q . k_j) v_j over all rows of all spans, in order.
// q: (head_dim) f32; out: (head_dim) f32. With zero rows, out = 0.
void AttendF16(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
               float* out, Isa isa = ActiveIsa());

// The normalized attention weights (softmax of scale * q . k_j) over the same rows, for taps and
// tests: weights has one entry per row, spans in order.
void AttentionWeightsF16(const float* q, int head_dim, const KvSpan* spans, int n_spans,
                         float scale, float* weights);

}  // namespace kvmem::kernels
