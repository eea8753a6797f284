// AVX2/FMA/F16C attention over quantized KV formats (any layout but f16/f16, which keeps its own
// kernel in attention_avx2.cpp), and the AVX2 scores behind AttentionWeights for every layout.
//
// Same shape as the f16 kernel: rows are taken eight at a time across span boundaries; eight
// dot products end in one transposed horizontal sum; the online softmax is updated once per
// eight rows; the V rows are then dequantized and added chunk by chunk of 32 dims, so the
// accumulator is loaded and stored once per eight rows.
//
// K scores (attention.cpp states the arithmetic):
//   q8_0 / q4_0: q is quantized once per call by the AVX2 Q8_0 quantizer (as ggml's AVX2 path
//     quantizes activations); |q| is kept so each row needs one sign and one maddubs per block
//     (|q| * sign(k, q) = q * k).
//   kivi4: q * scale is quantized once per group (a ring of prepared groups, so rows of a batch
//     may come from different groups); a row costs one maddubs per 32 channels, unsigned codes
//     times signed query bytes, as ggml's Q4_1 x Q8_1. Staged rows are f16 dots with q.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/attention_internal.h"
#include "kernels/kivi.h"
#include "kernels/quant_avx2_common.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_internal.h"
#include "kernels/vec_math_avx2.h"

namespace kvmem::kernels {
namespace {

using quant_avx2_detail::HalfToFloat;
using quant_avx2_detail::LoadNibbles32;
using quant_avx2_detail::MulSumU8I8Pairs;

constexpr int kBatch = 8;
constexpr int kChunk = 32;
constexpr int kMaxChunks = kAttendStackDim / kChunk;
// Prepared kivi groups kept at once: a batch references at most kBatch of them.
constexpr int kKiviRing = 2 * kBatch;

// Eight f16 values starting at element `d` of the row at p.
inline __m256 LoadF16(const uint8_t* p, int d) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * d)));
}

inline __m256i Load256(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Eight consecutive int8 / uint8 values -> eight floats.
inline __m256 I8x8ToFloat(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// An f16 field (the scale d, or Q4_1's m) of block c of each of the 8 rows, as floats times
// `mul`: lane r = field(row r, block c) * mul_r. One conversion for the batch, not one per row.
template <typename Block, uint16_t Block::*kField = &Block::d>
inline __m256 RowScales(const uint8_t* const* rows, int c, __m256 mul) {
  uint16_t d[kBatch];
  for (int r = 0; r < kBatch; ++r) d[r] = (reinterpret_cast<const Block*>(rows[r]) + c)->*kField;
  return _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d))), mul);
}

// q * scale of one kivi group, quantized (attention.cpp): x_c = q_c scale_c; per 32 channels
// d = max|x| / 127, qq = round_even(x / d). Bit-identical to the scalar preparation.
struct KiviQuery {
  alignas(32) int8_t qq[kAttendStackDim];
  float d[kMaxChunks];
  float qm;  // sum_c q_c min_c
};

void PrepareKivi(const float* q, const uint8_t* group, int hd, KiviQuery* out) {
  const uint8_t* mins = group + KiviMinsOffset(hd);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 qm = _mm256_setzero_ps();
  for (int c = 0; c < hd / kChunk; ++c) {
    __m256 x[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      const int i = c * kChunk + 8 * k;
      const __m256 qv = _mm256_loadu_ps(q + i);
      x[k] = _mm256_mul_ps(qv, LoadF16(group, i));
      qm = _mm256_fmadd_ps(qv, LoadF16(mins, i), qm);
      amax = _mm256_max_ps(amax, _mm256_and_ps(x[k], abs_mask));
    }
    const float d = avx2::Hmax(amax) / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    out->d[c] = d;
    __m256i qi[4];
    // cvtps rounds to nearest even (the default MXCSR mode), as nearbyint does.
    for (int k = 0; k < 4; ++k) qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(x[k], id));
    const __m256i p8 =
        _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->qq + c * kChunk),
                       _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  out->qm = avx2::Hsum(qm);
}

// Prepared groups, reused while consecutive rows stay in one group.
class KiviRing {
 public:
  const KiviQuery* Get(const float* q, int hd, const uint8_t* group) {
    if (group != last_) {
      pos_ = (pos_ + 1) % kKiviRing;
      PrepareKivi(q, group, hd, &slots_[pos_]);
      last_ = group;
    }
    return &slots_[pos_];
  }

 private:
  KiviQuery slots_[kKiviRing];
  const uint8_t* last_ = nullptr;
  int pos_ = 0;
};
struct NoRing {};

// q prepared once per call.
struct Query {
  const float* q;  // (head_dim) f32: f16 rows
  int hd;
  // q8_0 / q4_0 K: q as Q8_0 codes, their absolute values, and the block scales.
  alignas(32) int8_t q8[kAttendStackDim];
  alignas(32) int8_t q8_abs[kAttendStackDim];
  float q8_d[kMaxChunks];
};

template <KType K>
void PrepareQuery(const float* q, int hd, Query* qp) {
  qp->q = q;
  qp->hd = hd;
  if constexpr (K == KType::kQ8_0 || K == KType::kQ4_0) {
    BlockQ8_0 blocks[kMaxChunks];
    avx2::FromFloatQ8_0(q, blocks, hd);
    for (int c = 0; c < hd / kChunk; ++c) {
      const __m256i v = Load256(blocks[c].qs);
      _mm256_store_si256(reinterpret_cast<__m256i*>(qp->q8 + c * kChunk), v);
      _mm256_store_si256(reinterpret_cast<__m256i*>(qp->q8_abs + c * kChunk), _mm256_abs_epi8(v));
      qp->q8_d[c] = HalfToFloat(blocks[c].d);
    }
  }
}

// Up to kBatch rows; unused slots repeat a real row.
struct Batch {
  const uint8_t* k[kBatch];
  const uint8_t* v[kBatch];
  const KiviQuery* kivi[kBatch];  // kivi4: the row's prepared group, nullptr for an f16 row
  bool any_f16 = false;           // kivi4: some row is an f16 (staged) row
};

inline __m256 DotF16(const float* q, const uint8_t* k, int hd) {
  __m256 acc = _mm256_setzero_ps();
  for (int d = 0; d < hd; d += 8) acc = _mm256_fmadd_ps(LoadF16(k, d), _mm256_loadu_ps(q + d), acc);
  return acc;
}

// Lane r: q . k_r, unscaled. kChunks > 0 fixes head_dim = 32 kChunks at compile time.
template <KType K, int kChunks>
[[gnu::always_inline]] inline __m256 Dots8(const Query& qp, const Batch& b) {
  const int hd = kChunks > 0 ? kChunks * kChunk : qp.hd;
  __m256 dots[kBatch];
  for (int r = 0; r < kBatch; ++r) dots[r] = _mm256_setzero_ps();
  if constexpr (K == KType::kF16) {
    for (int d = 0; d < hd; d += 8) {
      const __m256 qv = _mm256_loadu_ps(qp.q + d);
      for (int r = 0; r < kBatch; ++r) dots[r] = _mm256_fmadd_ps(LoadF16(b.k[r], d), qv, dots[r]);
    }
    return avx2::Hsum8(dots);
  } else if constexpr (K == KType::kQ8_0 || K == KType::kQ4_0) {
    using Block = std::conditional_t<K == KType::kQ8_0, BlockQ8_0, BlockQ4_0>;
    for (int c = 0; c < hd / kChunk; ++c) {
      const __m256i qa = Load256(qp.q8_abs + c * kChunk);
      const __m256i qs = Load256(qp.q8 + c * kChunk);
      alignas(32) float dd[kBatch];  // d_k(row r) * d_q
      _mm256_store_ps(dd, RowScales<Block>(b.k, c, _mm256_set1_ps(qp.q8_d[c])));
      for (int r = 0; r < kBatch; ++r) {
        const Block* kb = reinterpret_cast<const Block*>(b.k[r]) + c;
        __m256i kx;
        if constexpr (K == KType::kQ8_0) {
          kx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb->qs));
        } else {
          kx = _mm256_sub_epi8(LoadNibbles32(kb->qs), _mm256_set1_epi8(8));
        }
        const __m256 prod = MulSumU8I8Pairs(qa, _mm256_sign_epi8(kx, qs));
        dots[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[r]), prod, dots[r]);
      }
    }
    return avx2::Hsum8(dots);
  } else {
    alignas(32) float qm[kBatch];
    if (!b.any_f16) {
      // Every row in a whole group: branch-free, the eight accumulators stay in registers.
      for (int c = 0; c < hd / kChunk; ++c) {
        for (int r = 0; r < kBatch; ++r) {
          const __m256 prod = MulSumU8I8Pairs(LoadNibbles32(b.k[r] + c * (kChunk / 2)),
                                              Load256(b.kivi[r]->qq + c * kChunk));
          dots[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&b.kivi[r]->d[c]), prod, dots[r]);
        }
      }
      for (int r = 0; r < kBatch; ++r) qm[r] = b.kivi[r]->qm;
      return _mm256_add_ps(avx2::Hsum8(dots), _mm256_load_ps(qm));
    }
    for (int r = 0; r < kBatch; ++r) {
      const KiviQuery* kq = b.kivi[r];
      if (kq == nullptr) {
        dots[r] = DotF16(qp.q, b.k[r], hd);
        qm[r] = 0.0f;
        continue;
      }
      for (int c = 0; c < hd / kChunk; ++c) {
        const __m256 prod =
            MulSumU8I8Pairs(LoadNibbles32(b.k[r] + c * (kChunk / 2)), Load256(kq->qq + c * kChunk));
        dots[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&kq->d[c]), prod, dots[r]);
      }
      qm[r] = kq->qm;
    }
    return _mm256_add_ps(avx2::Hsum8(dots), _mm256_load_ps(qm));
  }
}

// acc (head_dim) += sum_r pw[r] v_r.
template <VType V, int kChunks>
[[gnu::always_inline]] inline void AccumulateV(const float* pw, const Batch& b, int dim,
                                               float* acc) {
  const int hd = kChunks > 0 ? kChunks * kChunk : dim;
  if constexpr (V == VType::kF16) {
    __m256 pb[kBatch];
    for (int r = 0; r < kBatch; ++r) pb[r] = _mm256_set1_ps(pw[r]);
    for (int d = 0; d < hd; d += 8) {
      __m256 o = _mm256_loadu_ps(acc + d);
      for (int r = 0; r < kBatch; ++r) o = _mm256_fmadd_ps(pb[r], LoadF16(b.v[r], d), o);
      _mm256_storeu_ps(acc + d, o);
    }
  } else if constexpr (V == VType::kQ8_0) {
    for (int c = 0; c < hd / kChunk; ++c) {
      float* a = acc + c * kChunk;
      __m256 o[4];
      for (int k = 0; k < 4; ++k) o[k] = _mm256_loadu_ps(a + 8 * k);
      alignas(32) float wd[kBatch];  // pw[r] * d(row r)
      _mm256_store_ps(wd, RowScales<BlockQ8_0>(b.v, c, _mm256_loadu_ps(pw)));
      for (int r = 0; r < kBatch; ++r) {
        const BlockQ8_0* vb = reinterpret_cast<const BlockQ8_0*>(b.v[r]) + c;
        const __m256 w = _mm256_broadcast_ss(&wd[r]);
        for (int k = 0; k < 4; ++k) o[k] = _mm256_fmadd_ps(w, I8x8ToFloat(vb->qs + 8 * k), o[k]);
      }
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(a + 8 * k, o[k]);
    }
  } else {
    // q4_1: v = d code + m; q4_0: v = d code - 8 d. The offsets are summed over the rows apart
    // and added once.
    using Block = std::conditional_t<V == VType::kQ4_0, BlockQ4_0, BlockQ4_1>;
    const __m256i low = _mm256_set1_epi32(0x0F);
    for (int c = 0; c < hd / kChunk; ++c) {
      float* a = acc + c * kChunk;
      __m256 o[4];
      for (int k = 0; k < 4; ++k) o[k] = _mm256_loadu_ps(a + 8 * k);
      alignas(32) float wd[kBatch];  // pw[r] * d(row r)
      const __m256 wdv = RowScales<Block>(b.v, c, _mm256_loadu_ps(pw));
      _mm256_store_ps(wd, wdv);
      for (int r = 0; r < kBatch; ++r) {
        const Block* vb = reinterpret_cast<const Block*>(b.v[r]) + c;
        const __m256 w = _mm256_broadcast_ss(&wd[r]);
        // Bytes 0..7 and 8..15 widened: low nibbles are elements 0..15, high ones 16..31.
        const __m256i b0 =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(vb->qs)));
        const __m256i b1 =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(vb->qs + 8)));
        const __m256i e[4] = {_mm256_and_si256(b0, low), _mm256_and_si256(b1, low),
                              _mm256_srli_epi32(b0, 4), _mm256_srli_epi32(b1, 4)};
        for (int k = 0; k < 4; ++k) o[k] = _mm256_fmadd_ps(w, _mm256_cvtepi32_ps(e[k]), o[k]);
      }
      float offset;
      if constexpr (V == VType::kQ4_1) {
        offset = avx2::Hsum(RowScales<Block, &Block::m>(b.v, c, _mm256_loadu_ps(pw)));
      } else {
        offset = -8.0f * avx2::Hsum(wdv);
      }
      const __m256 off = _mm256_set1_ps(offset);
      for (int k = 0; k < 4; ++k) o[k] = _mm256_add_ps(o[k], off);
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(a + 8 * k, o[k]);
    }
  }
}

struct OnlineSoftmax {
  float* acc;  // (head_dim) sum of weight * v, relative to exp(m)
  float m = -INFINITY;
  float l = 0.0f;  // sum of weights, relative to exp(m)
};

// Adds the first n (1..8) rows of b to st.
template <KType K, VType V, int kChunks>
void AddBatch(const Query& qp, const Batch& b, int n, float scale, OnlineSoftmax* st) {
  const int hd = kChunks > 0 ? kChunks * kChunk : qp.hd;
  __m256 s = _mm256_mul_ps(Dots8<K, kChunks>(qp, b), _mm256_set1_ps(scale));
  const __m256 live = _mm256_castsi256_ps(avx2::TailMask(n));
  s = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, live);

  const float batch_max = avx2::Hmax(s);
  if (batch_max > st->m) {
    const float alpha = std::exp(st->m - batch_max);
    st->m = batch_max;
    st->l *= alpha;
    const __m256 va = _mm256_set1_ps(alpha);
    for (int d = 0; d < hd; d += 8) {
      _mm256_storeu_ps(st->acc + d, _mm256_mul_ps(_mm256_loadu_ps(st->acc + d), va));
    }
  }
  const __m256 p = _mm256_and_ps(avx2::Exp(_mm256_sub_ps(s, _mm256_set1_ps(st->m))), live);
  st->l += avx2::Hsum(p);
  alignas(32) float pw[kBatch];
  _mm256_store_ps(pw, p);
  AccumulateV<V, kChunks>(pw, b, hd, st->acc);
}

// Walks the rows of the spans into batches, calling flush(batch, n) for each full or final one.
template <KType K, typename Flush>
void ForEachBatch(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                  Flush&& flush) {
  std::conditional_t<K == KType::kKivi4, KiviRing, NoRing> ring;
  Batch b;
  int n = 0;
  ForEachKvRow(layout, spans, n_spans, [&](const KvRowPtr& row) {
    b.k[n] = row.k;
    b.v[n] = row.v;
    if constexpr (K == KType::kKivi4) {
      if (row.kivi_group != nullptr) {
        b.kivi[n] = ring.Get(q, layout.head_dim, row.kivi_group);
      } else {
        b.kivi[n] = nullptr;
        b.any_f16 = true;
      }
    } else {
      b.kivi[n] = nullptr;
    }
    if (++n == kBatch) {
      flush(b, n);
      n = 0;
      b.any_f16 = false;
    }
  });
  if (n > 0) {
    for (int r = n; r < kBatch; ++r) {
      b.k[r] = b.k[n - 1];
      b.v[r] = b.v[n - 1];
      b.kivi[r] = b.kivi[n - 1];
    }
    flush(b, n);
  }
}

template <KType K, VType V, int kChunks>
void AttendT(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans, float scale,
             float* out) {
  const int hd = layout.head_dim;
  Query qp;
  PrepareQuery<K>(q, hd, &qp);
  alignas(32) float acc[kAttendStackDim];
  std::memset(acc, 0, sizeof(float) * hd);
  OnlineSoftmax st{.acc = acc};
  ForEachBatch<K>(q, layout, spans, n_spans,
                  [&](const Batch& b, int n) { AddBatch<K, V, kChunks>(qp, b, n, scale, &st); });
  const __m256 inv = _mm256_set1_ps(st.l == 0.0f ? 0.0f : 1.0f / st.l);
  for (int d = 0; d < hd; d += 8) {
    _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), inv));
  }
}

template <KType K, VType V>
void AttendKV(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans, float scale,
              float* out) {
  switch (layout.head_dim) {
    case 64:
      return AttendT<K, V, 2>(q, layout, spans, n_spans, scale, out);
    case 128:
      return AttendT<K, V, 4>(q, layout, spans, n_spans, scale, out);
    case 256:
      return AttendT<K, V, 8>(q, layout, spans, n_spans, scale, out);
    default:
      return AttendT<K, V, 0>(q, layout, spans, n_spans, scale, out);
  }
}

using AttendFn = void (*)(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                          float scale, float* out);

template <KType K>
constexpr AttendFn kAttendRow[kNumVTypes] = {&AttendKV<K, VType::kF16>, &AttendKV<K, VType::kQ8_0>,
                                             &AttendKV<K, VType::kQ4_0>,
                                             &AttendKV<K, VType::kQ4_1>};

// [K type][V type], in enum order.
constexpr const AttendFn* kAttendTable[kNumKTypes] = {
    kAttendRow<KType::kF16>, kAttendRow<KType::kQ8_0>, kAttendRow<KType::kQ4_0>,
    kAttendRow<KType::kKivi4>};

template <KType K>
void ScoresT(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans, float scale,
             float* scores) {
  Query qp;
  PrepareQuery<K>(q, layout.head_dim, &qp);
  const __m256 vs = _mm256_set1_ps(scale);
  ForEachBatch<K>(q, layout, spans, n_spans, [&](const Batch& b, int n) {
    alignas(32) float s[kBatch];
    _mm256_store_ps(s, _mm256_mul_ps(Dots8<K, 0>(qp, b), vs));
    std::memcpy(scores, s, sizeof(float) * n);
    scores += n;
  });
}

}  // namespace

void AttendQuantAvx2(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                     float scale, float* out) {
  kAttendTable[static_cast<int>(layout.k)][static_cast<int>(layout.v)](q, layout, spans, n_spans,
                                                                       scale, out);
}

void ScoresAvx2(const float* q, const KvLayout& layout, const KvSpan* spans, int n_spans,
                float scale, float* scores) {
  switch (layout.k) {
    case KType::kF16:
      return ScoresT<KType::kF16>(q, layout, spans, n_spans, scale, scores);
    case KType::kQ8_0:
      return ScoresT<KType::kQ8_0>(q, layout, spans, n_spans, scale, scores);
    case KType::kQ4_0:
      return ScoresT<KType::kQ4_0>(q, layout, spans, n_spans, scale, scores);
    case KType::kKivi4:
      return ScoresT<KType::kKivi4>(q, layout, spans, n_spans, scale, scores);
  }
}

}  // namespace kvmem::kernels
