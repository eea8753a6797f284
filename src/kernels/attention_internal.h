// The per-ISA attention kernels behind the dispatch in attention.cpp, and the row walk they
// share. Internal to kernels/.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/kivi.h"

namespace kvmem::kernels {

// Largest head_dim whose accumulator lives on the stack; larger ones allocate (scalar) or are
// not taken by the AVX2 kernels.
inline constexpr int kAttendStackDim = 512;

// Scalar reference kernels: any valid layout.
void AttendScalar(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                  float scale, float* out, float sink);
// scores[j] = scale * q . k_j for every row, spans in order.
void ScoresScalar(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                  float scale, float* scores);

// AVX2 kernels; call only where CpuSupports(Isa::kAvx2).
// f16 K and V; requires head_dim % 8 == 0 and head_dim <= kAttendStackDim.
void AttendF16Avx2(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
                   float* out);
// The unnormalized state (kernels/attention.h AttendPartial) of n_q queries over the same f16
// rows; same requirements.
void AttendF16GroupAvx2(const float* q, int n_q, int head_dim, const KvSpan* spans, int n_spans,
                        float scale, float* acc, float* m, float* l);
// The same with AVX-512 (F, DQ), sixteen rows at a time, over f16 or q8_0 K and V
// (AttendGroupAvx512Supported).
bool AttendGroupAvx512Supported(const KvLayout& layout);
void AttendGroupAvx512(const float* q, int n_q, const KvLayout& layout, const KvSpan* spans,
                       int n_spans, float scale, float* acc, float* m, float* l);
// Any layout with a quantized K or V; requires head_dim <= kAttendStackDim.
void AttendQuantAvx2(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                     float scale, float* out);
// As ScoresScalar, any valid layout with head_dim % 8 == 0 and head_dim <= kAttendStackDim.
void ScoresAvx2(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                float scale, float* scores);

// One row as the kernels read it.
struct KvRowPtr {
  // A K row of layout.k; for kivi4 the row's codes inside `kivi_group`, or an f16 row when
  // kivi_group is nullptr (a staged row of an incomplete group).
  const uint8_t* k;
  const uint8_t* v;  // a V row of layout.v
  const uint8_t* kivi_group;
};

// Calls fn(KvRowPtr) for every row of the spans, in order. A template instantiated inside each
// kernel's translation unit (fn is a local lambda), so the baseline and AVX2 builds of it never
// merge.
template <typename Fn>
inline void ForEachKvRow(const KvLayout& layout, const KvSpan* spans, int n_spans, Fn&& fn) {
  if (layout.k != KType::kKivi4) {
    for (int s = 0; s < n_spans; ++s) {
      const KvSpan& sp = spans[s];
      for (int64_t j = 0; j < sp.n_rows; ++j) {
        fn(KvRowPtr{sp.k + j * sp.k_stride, sp.v + j * sp.v_stride, nullptr});
      }
    }
    return;
  }
  const int64_t codes = static_cast<int64_t>(KiviCodesOffset(layout.head_dim));
  const int64_t code_row = layout.head_dim / 2;
  for (int s = 0; s < n_spans; ++s) {
    const KvSpan& sp = spans[s];
    const int64_t n_quant = std::min(sp.n_rows, sp.k_quantized_rows);
    int64_t j = 0;
    while (j < n_quant) {  // one group at a time
      const int64_t r = sp.k_group_row + j;
      const uint8_t* group = sp.k + (r / kKiviGroupRows) * sp.k_stride;
      const int64_t seg = std::min(n_quant - j, kKiviGroupRows - r % kKiviGroupRows);
      const uint8_t* k = group + codes + (r % kKiviGroupRows) * code_row;
      const uint8_t* v = sp.v + j * sp.v_stride;
      for (int64_t i = 0; i < seg; ++i) fn(KvRowPtr{k + i * code_row, v + i * sp.v_stride, group});
      j += seg;
    }
    for (; j < sp.n_rows; ++j) {
      const uint16_t* staged = sp.k_staging + (j - sp.k_quantized_rows) * layout.head_dim;
      fn(KvRowPtr{reinterpret_cast<const uint8_t*>(staged), sp.v + j * sp.v_stride, nullptr});
    }
  }
}

// Calls block(k, v, n) for the rows of the spans (per-row K types) in order, kBlock at a time
// (the last call may have fewer): k[i] and v[i] point at the i-th row of the block. The grouped
// kernels convert each block once for all their queries.
template <int kBlock, typename Fn>
inline void ForEachRowBlock(const KvSpan* spans, int n_spans, Fn&& block) {
  const uint8_t* k[kBlock];
  const uint8_t* v[kBlock];
  int n = 0;
  for (int s = 0; s < n_spans; ++s) {
    // Locals, so the loop does not reload the span after every call of `block`.
    const uint8_t* kp = spans[s].k;
    const uint8_t* vp = spans[s].v;
    const int64_t k_stride = spans[s].k_stride, v_stride = spans[s].v_stride;
    for (int64_t j = spans[s].n_rows; j > 0; --j, kp += k_stride, vp += v_stride) {
      k[n] = kp;
      v[n] = vp;
      if (++n == kBlock) {
        block(k, v, n);
        n = 0;
      }
    }
  }
  if (n > 0) block(k, v, n);
}

}  // namespace kvmem::kernels
