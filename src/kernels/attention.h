// Single-query attention over KV rows read in place from their storage format, through spans so
// a sequence's cache can be any list of row ranges of the block pool (kv/). Online (streaming)
// softmax in one pass, so no buffer of scores is needed. Thread-safe: pure functions.
//
// Storage formats, chosen separately for K and V (KvLayout):
//   K: f16 rows; q8_0 / q4_0 rows (ggml blocks of 32 along head_dim); kivi4 (KIVI): groups of
//      kKiviGroupRows consecutive rows quantized per channel (kernels/kivi.h), the rows of the
//      newest, incomplete group read from f16 staging.
//   V: f16, q8_0, q4_0 or q4_1 rows (q4_1 is KIVI's per-token 4-bit V).
// Quantized K is scored with integer dot products as ggml does: q is quantized once per call to
// 8 bits (Q8_0 blocks for q8_0 / q4_0 K with the ISA's own Q8_0 quantizer; for kivi4, q * scale
// per group and channel, in blocks of 32 channels with a float scale), so scores carry q's
// quantization error on top of the format's own (bound stated and checked in
// tests/kernels/attention_test.cpp). V rows are dequantized and accumulated in f32.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "kernels/cpu_features.h"

namespace kvmem::kernels {

enum class KType : uint8_t { kF16 = 0, kQ8_0 = 1, kQ4_0 = 2, kKivi4 = 3 };
enum class VType : uint8_t { kF16 = 0, kQ8_0 = 1, kQ4_0 = 2, kQ4_1 = 3 };
inline constexpr int kNumKTypes = 4;
inline constexpr int kNumVTypes = 4;

const char* KTypeName(KType t);
const char* VTypeName(VType t);

// How the rows of one KV head are stored. K and V rows have the same head_dim; it is a multiple
// of 32 whenever either type is quantized (KvLayoutValid).
struct KvLayout {
  KType k = KType::kF16;
  VType v = VType::kF16;
  int head_dim = 0;
};
bool KvLayoutValid(const KvLayout& layout);

// Bytes of one stored row (one token, one KV head), scales included. kivi4 K: a group's bytes
// divided by its kKiviGroupRows rows (head_dim / 2 of codes + 4 * head_dim / 32 of f16 scales
// and mins), excluding the f16 staging of an incomplete group.
size_t KRowBytes(KType t, int head_dim);
size_t VRowBytes(VType t, int head_dim);
// The ggml row type of a per-row storage type (its TypeTraits convert rows); k != kKivi4.
DType KRowDType(KType k);
DType VRowDType(VType v);

// n_rows consecutive K and V rows of one KV head. A caller may lower n_rows to read a prefix of
// the span; every other field stays as the producer (kv::KvPool::Span) set it.
struct KvSpan {
  // Per-row K types: row i at k + i * k_stride. kivi4: the group holding the span's row 0; group
  // g after it at k + g * k_stride, the span's row i being row k_group_row + i of that run.
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;  // row i at v + i * v_stride
  int64_t n_rows = 0;          // rows [0, n_rows) are read
  int64_t k_stride = 0;        // bytes
  int64_t v_stride = 0;        // bytes
  // kivi4 only. Rows [0, k_quantized_rows) are read from groups; row i >= k_quantized_rows is
  // the f16 row k_staging + (i - k_quantized_rows) * head_dim (the incomplete group's staging).
  int32_t k_group_row = 0;  // 0 .. kKiviGroupRows-1
  int64_t k_quantized_rows = 0;
  const uint16_t* k_staging = nullptr;
};

// out = sum_j softmax_j(scale * q . k_j) v_j over all rows of all spans, in order.
// q: (head_dim) f32; out: (head_dim) f32, may alias q. With zero rows, out = 0.
// sink: an attention sink (GPT-OSS): a logit, in the units of the scaled scores, that enters
// the softmax's denominator with no value row, exp(sink - m) added to l (ggml's soft_max and
// flash attention with sinks); -inf: none. With a sink, layouts AttendPartial does not handle
// take the scalar kernel. Requires KvLayoutValid(layout).
void Attend(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans, float scale,
            float* out, Isa isa = ActiveIsa(),
            float sink = -std::numeric_limits<float>::infinity());

// Attention split into parts that merge (flash-decoding): the unnormalized state of n_q queries
// (consecutive in q, head_dim each) over the same rows — per query g, m[g] the largest score,
// l[g] = sum_j exp(s_j - m[g]), acc[g] = sum_j exp(s_j - m[g]) v_j (head_dim floats) — so that
// acc / l is Attend's output, and states of consecutive row ranges merge exactly. No rows: m =
// -inf, l = 0, acc = 0. Only where AttendPartialSupported: f16 K and V with AVX2, or f16 / q8_0
// K and V with AVX-512; the query heads of a KV head then share one conversion of each row, and
// q8_0 K is converted exactly to f32 (q is not quantized, unlike Attend's).
bool AttendPartialSupported(const KvLayout& layout, Isa isa = ActiveIsa());
void AttendPartial(const float* q, int n_q, const KvLayout& layout, const KvSpan* spans,
                   int n_spans, float scale, float* acc, float* m, float* l, Isa isa = ActiveIsa());
// (acc, m, l) becomes the state of its rows followed by those of (acc2, m2, l2).
void MergeAttendPartial(int n_q, int head_dim, float* acc, float* m, float* l, const float* acc2,
                        const float* m2, const float* l2);
// out (n_q x head_dim) = acc / (l + exp(sinks[g] - m)) (0 where l = 0); sinks: (n_q) attention
// sinks as Attend's, or nullptr for none.
void FinishAttendPartial(int n_q, int head_dim, const float* acc, const float* m, const float* l,
                         const float* sinks, float* out);

// 1 / the softmax denominator of a state with largest score m and l = sum exp(s_j - m), an
// attention sink (or -inf) counted in it; 0 when there are no rows (l = 0).
inline float InverseDenominator(float m, float l, float sink) {
  return l == 0.0f ? 0.0f : 1.0f / (l + std::exp(sink - m));
}

// The normalized attention weights (softmax of scale * q . k_j, the same scores as Attend) over
// the same rows, for taps and tests: weights has one entry per row, spans in order.
void AttentionWeights(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                      float scale, float* weights, Isa isa = ActiveIsa());

}  // namespace kvmem::kernels
