// Attend / AttentionWeights dispatch, the scalar reference kernels, and the row sizes of each
// storage type.
//
// The scalar kernel is ggml's flash-attention recurrence (ggml_compute_forward_flash_attn_ext):
// per row, s = scale * q.k; if s exceeds the running max m, the accumulator and the running sum
// l are rescaled by exp(m_old - s); otherwise the row enters with weight exp(s - m). The result
// is acc / l.
//
// Scores per K type (the AVX2 kernels compute the same quantities, summed in another order):
//   f16:    sum_d q_d k_d in f32.
//   q8_0, q4_0: q -> Q8_0 with the ISA's quantizer, then the type's vec_dot (integer sums per
//           block, scaled by d_k d_q).
//   kivi4:  per group, x_c = q_c * scale_c is quantized per 32 channels to int8 with a float scale
//           d_b = max|x| / 127 (round to nearest even), so that
//             q . k = sum_b d_b sum_{c in b} qq_c code_c + sum_c q_c min_c,
//           the second sum (qm) taken in f32 once per group. Staged rows are f16 rows.
#include "kernels/attention.h"

#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/attention_internal.h"
#include "kernels/quant_blocks.h"
#include "kernels/type_traits.h"

namespace kvmem::kernels {
namespace {

constexpr int kChunk = 32;

float DotF16(const float* q, const uint8_t* k, int head_dim) {
  float s = 0.0f;
  for (int d = 0; d < head_dim; ++d) {
    uint16_t h;
    std::memcpy(&h, k + 2 * d, 2);
    s += q[d] * F16ToF32(h);
  }
  return s;
}

// q prepared once per call for the scalar scores.
class ScalarScorer {
 public:
  ScalarScorer(const float* q, const KvLayout& layout) : q_(q), layout_(layout) {
    const int hd = layout.head_dim;
    if (layout.k == KType::kQ8_0 || layout.k == KType::kQ4_0) {
      const TypeTraits* q8 = GetTypeTraits(DType::kQ8_0, Isa::kScalar);
      k_traits_ = GetTypeTraits(KRowDType(layout.k), Isa::kScalar);
      q8_.resize(hd / kChunk);
      q8->from_float(q, q8_.data(), hd);
    } else if (layout.k == KType::kKivi4) {
      d_.resize(hd / kChunk);
      qq_.resize(hd);
      x_.resize(hd);
    }
  }

  // q . k of one row (unscaled).
  float Dot(const KvRowPtr& row) {
    const int hd = layout_.head_dim;
    switch (layout_.k) {
      case KType::kF16:
        return DotF16(q_, row.k, hd);
      case KType::kQ8_0:
      case KType::kQ4_0:
        return k_traits_->vec_dot(hd, row.k, q8_.data());
      case KType::kKivi4:
        if (row.kivi_group == nullptr) return DotF16(q_, row.k, hd);
        if (row.kivi_group != group_) Prepare(row.kivi_group);
        return KiviDot(row.k);
    }
    return 0.0f;
  }

 private:
  // The group's quantized q * scale and q . min (see the file comment).
  void Prepare(const uint8_t* group) {
    const int hd = layout_.head_dim;
    group_ = group;
    qm_ = 0.0f;
    for (int c = 0; c < hd; ++c) {
      uint16_t s, m;
      std::memcpy(&s, group + 2 * c, 2);
      std::memcpy(&m, group + KiviMinsOffset(hd) + 2 * c, 2);
      x_[c] = q_[c] * F16ToF32(s);
      qm_ += q_[c] * F16ToF32(m);
    }
    for (int b = 0; b < hd / kChunk; ++b) {
      float amax = 0.0f;
      for (int i = 0; i < kChunk; ++i) amax = std::fmax(amax, std::fabs(x_[b * kChunk + i]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      d_[b] = d;
      for (int i = 0; i < kChunk; ++i) {
        qq_[b * kChunk + i] = static_cast<int8_t>(std::nearbyint(x_[b * kChunk + i] * id));
      }
    }
  }

  float KiviDot(const uint8_t* codes) const {
    float sum = 0.0f;
    for (int b = 0; b < layout_.head_dim / kChunk; ++b) {
      const uint8_t* c = codes + b * (kChunk / 2);
      const int8_t* y = qq_.data() + b * kChunk;
      int isum = 0;
      for (int j = 0; j < kChunk / 2; ++j) {
        isum += (c[j] & 0x0F) * y[j] + (c[j] >> 4) * y[j + kChunk / 2];
      }
      sum += d_[b] * static_cast<float>(isum);
    }
    return sum + qm_;
  }

  const float* q_;
  KvLayout layout_;
  const TypeTraits* k_traits_ = nullptr;
  std::vector<BlockQ8_0> q8_;  // q8_0 / q4_0 K: (head_dim / 32)
  // kivi4: the prepared group.
  const uint8_t* group_ = nullptr;
  std::vector<float> d_;    // (head_dim / 32)
  std::vector<int8_t> qq_;  // (head_dim)
  std::vector<float> x_;    // (head_dim) scratch
  float qm_ = 0.0f;
};

}  // namespace

const char* KTypeName(KType t) {
  switch (t) {
    case KType::kF16:
      return "f16";
    case KType::kQ8_0:
      return "q8_0";
    case KType::kQ4_0:
      return "q4_0";
    case KType::kKivi4:
      return "kivi4";
  }
  return "?";
}

const char* VTypeName(VType t) {
  switch (t) {
    case VType::kF16:
      return "f16";
    case VType::kQ8_0:
      return "q8_0";
    case VType::kQ4_0:
      return "q4_0";
    case VType::kQ4_1:
      return "q4_1";
  }
  return "?";
}

bool KvLayoutValid(const KvLayout& layout) {
  if (layout.head_dim <= 0) return false;
  const bool quantized = layout.k != KType::kF16 || layout.v != VType::kF16;
  return !quantized || layout.head_dim % kChunk == 0;
}

size_t KRowBytes(KType t, int head_dim) {
  const size_t hd = static_cast<size_t>(head_dim);
  switch (t) {
    case KType::kF16:
      return 2 * hd;
    case KType::kQ8_0:
      return hd / kQK8_0 * sizeof(BlockQ8_0);
    case KType::kQ4_0:
      return hd / kQK4_0 * sizeof(BlockQ4_0);
    case KType::kKivi4:
      return KiviGroupBytes(head_dim) / kKiviGroupRows;
  }
  return 0;
}

size_t VRowBytes(VType t, int head_dim) {
  const size_t hd = static_cast<size_t>(head_dim);
  switch (t) {
    case VType::kF16:
      return 2 * hd;
    case VType::kQ8_0:
      return hd / kQK8_0 * sizeof(BlockQ8_0);
    case VType::kQ4_0:
      return hd / kQK4_0 * sizeof(BlockQ4_0);
    case VType::kQ4_1:
      return hd / kQK4_1 * sizeof(BlockQ4_1);
  }
  return 0;
}

DType KRowDType(KType k) {
  switch (k) {
    case KType::kF16:
      return DType::kF16;
    case KType::kQ8_0:
      return DType::kQ8_0;
    case KType::kQ4_0:
      return DType::kQ4_0;
    case KType::kKivi4:
      break;
  }
  assert(false && "kivi4 K is not a per-row type");
  return DType::kF16;
}

DType VRowDType(VType v) {
  switch (v) {
    case VType::kF16:
      return DType::kF16;
    case VType::kQ8_0:
      return DType::kQ8_0;
    case VType::kQ4_0:
      return DType::kQ4_0;
    case VType::kQ4_1:
      return DType::kQ4_1;
  }
  return DType::kF16;
}

void ScoresScalar(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                  float scale, float* scores) {
  ScalarScorer scorer(q, layout);
  int64_t n = 0;
  ForEachKvRow(layout, spans, n_spans,
               [&](const KvRowPtr& row) { scores[n++] = scale * scorer.Dot(row); });
}

void AttendScalar(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                  float scale, float* out, float sink) {
  const int hd = layout.head_dim;
  ScalarScorer scorer(q, layout);
  const TypeTraits* v_traits = GetTypeTraits(VRowDType(layout.v), Isa::kScalar);
  std::vector<float> acc(hd, 0.0f), v(hd);
  float m = -INFINITY;
  float l = 0.0f;
  ForEachKvRow(layout, spans, n_spans, [&](const KvRowPtr& row) {
    const float s = scale * scorer.Dot(row);
    float vs = 1.0f;
    if (s > m) {
      const float ms = std::exp(m - s);
      m = s;
      for (int d = 0; d < hd; ++d) acc[d] *= ms;
      l *= ms;
    } else {
      vs = std::exp(s - m);
    }
    v_traits->to_float(row.v, v.data(), hd);
    for (int d = 0; d < hd; ++d) acc[d] += vs * v[d];
    l += vs;
  });
  const float inv = InverseDenominator(m, l, sink);
  for (int d = 0; d < hd; ++d) out[d] = acc[d] * inv;
}

void Attend(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans, float scale,
            float* out, Isa isa, float sink) {
  assert(KvLayoutValid(layout));
  const int hd = layout.head_dim;
  if (sink != -std::numeric_limits<float>::infinity()) {
    if (!AttendPartialSupported(layout, isa))
      return AttendScalar(q, layout, spans, n_spans, scale, out, sink);
    alignas(32) float acc[kAttendStackDim];
    float m, l;
    AttendPartial(q, 1, layout, spans, n_spans, scale, acc, &m, &l, isa);
    return FinishAttendPartial(1, hd, acc, &m, &l, &sink, out);
  }
  if (isa == Isa::kAvx2 && hd <= kAttendStackDim) {
    if (layout.k != KType::kF16 || layout.v != VType::kF16) {
      return AttendQuantAvx2(q, layout, spans, n_spans, scale, out);
    }
    if (hd % 8 == 0) return AttendF16Avx2(q, hd, spans, n_spans, scale, out);
  }
  AttendScalar(q, layout, spans, n_spans, scale, out, sink);
}

bool AttendGroupAvx512Supported(const KvLayout& layout) {
  const bool k_ok = layout.k == KType::kF16 || layout.k == KType::kQ8_0;
  const bool v_ok = layout.v == VType::kF16 || layout.v == VType::kQ8_0;
  return Avx512Enabled() && k_ok && v_ok && KvLayoutValid(layout) && layout.head_dim % 16 == 0 &&
         layout.head_dim <= kAttendStackDim;
}

bool AttendPartialSupported(const KvLayout& layout, Isa isa) {
  if (isa != Isa::kAvx2) return false;
  if (AttendGroupAvx512Supported(layout)) return true;
  return layout.k == KType::kF16 && layout.v == VType::kF16 && layout.head_dim % 8 == 0 &&
         layout.head_dim <= kAttendStackDim;
}

void AttendPartial(const float* q, int n_q, const KvLayout& layout, const KvSpan* spans,
                   int n_spans, float scale, float* acc, float* m, float* l, Isa isa) {
  assert(AttendPartialSupported(layout, isa));
  (void)isa;
#if defined(__x86_64__)
  if (AttendGroupAvx512Supported(layout)) {
    return AttendGroupAvx512(q, n_q, layout, spans, n_spans, scale, acc, m, l);
  }
#endif
  AttendF16GroupAvx2(q, n_q, layout.head_dim, spans, n_spans, scale, acc, m, l);
}

void MergeAttendPartial(int n_q, int head_dim, float* acc, float* m, float* l, const float* acc2,
                        const float* m2, const float* l2) {
  for (int g = 0; g < n_q; ++g) {
    if (m2[g] == -INFINITY) continue;  // nothing to add
    float* a = acc + static_cast<size_t>(g) * head_dim;
    const float* b = acc2 + static_cast<size_t>(g) * head_dim;
    const float mx = std::fmax(m[g], m2[g]);
    const float sa = m[g] == -INFINITY ? 0.0f : std::exp(m[g] - mx);
    const float sb = std::exp(m2[g] - mx);
    for (int d = 0; d < head_dim; ++d) a[d] = a[d] * sa + b[d] * sb;
    l[g] = l[g] * sa + l2[g] * sb;
    m[g] = mx;
  }
}

void FinishAttendPartial(int n_q, int head_dim, const float* acc, const float* m, const float* l,
                         const float* sinks, float* out) {
  for (int g = 0; g < n_q; ++g) {
    const float sink = sinks != nullptr ? sinks[g] : -std::numeric_limits<float>::infinity();
    const float inv = InverseDenominator(m[g], l[g], sink);
    for (int d = 0; d < head_dim; ++d) {
      out[static_cast<size_t>(g) * head_dim + d] = acc[static_cast<size_t>(g) * head_dim + d] * inv;
    }
  }
}

void AttentionWeights(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                      float scale, float* weights, Isa isa) {
  assert(KvLayoutValid(layout));
  const int hd = layout.head_dim;
  if (isa == Isa::kAvx2 && hd % 8 == 0 && hd <= kAttendStackDim) {
    ScoresAvx2(q, layout, spans, n_spans, scale, weights);
  } else {
    ScoresScalar(q, layout, spans, n_spans, scale, weights);
  }
  int64_t n = 0;
  for (int sp = 0; sp < n_spans; ++sp) n += spans[sp].n_rows;
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, weights[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    weights[i] = std::exp(weights[i] - max);
    sum += static_cast<double>(weights[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) weights[i] *= inv;
}

}  // namespace kvmem::kernels
