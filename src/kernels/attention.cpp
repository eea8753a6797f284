// AttendF16 dispatch, the scalar reference kernel, and the two-pass AttentionWeightsF16.
//
// The scalar kernel is ggml's flash-attention recurrence (ggml_compute_forward_flash_attn_ext):
// per row, s = scale * q.k; if s exceeds the running max m, the accumulator and the running sum
// l are rescaled by exp(m_old - s); otherwise the row enters with weight exp(s - m). The result
// is acc / l.
#include "kernels/attention.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention_internal.h"

namespace kvmem::kernels {
namespace {

float ScoreScalar(const float* q, const uint16_t* k, int head_dim) {
  float s = 0.0f;
  for (int d = 0; d < head_dim; ++d) s += q[d] * F16ToF32(k[d]);
  return s;
}

}  // namespace

void AttendF16Scalar(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
                     float* out) {
  float acc_stack[kAttendStackDim];
  std::vector<float> acc_heap;
  float* acc = acc_stack;  // (head_dim)
  if (head_dim > kAttendStackDim) {
    acc_heap.resize(head_dim);
    acc = acc_heap.data();
  }
  std::memset(acc, 0, sizeof(float) * head_dim);
  float m = -INFINITY;
  float l = 0.0f;
  for (int sp = 0; sp < n_spans; ++sp) {
    const KvSpan& span = spans[sp];
    for (int64_t j = 0; j < span.n_rows; ++j) {
      const uint16_t* k = span.k + j * span.stride;
      const uint16_t* v = span.v + j * span.stride;
      const float s = scale * ScoreScalar(q, k, head_dim);
      float vs = 1.0f;
      if (s > m) {
        const float ms = std::exp(m - s);
        m = s;
        for (int d = 0; d < head_dim; ++d) acc[d] *= ms;
        l *= ms;
      } else {
        vs = std::exp(s - m);
      }
      for (int d = 0; d < head_dim; ++d) acc[d] += vs * F16ToF32(v[d]);
      l += vs;
    }
  }
  const float inv = l == 0.0f ? 0.0f : 1.0f / l;
  for (int d = 0; d < head_dim; ++d) out[d] = acc[d] * inv;
}

void AttendF16(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
               float* out, Isa isa) {
  if (isa == Isa::kAvx2 && head_dim % 8 == 0 && head_dim <= kAttendStackDim) {
    AttendF16Avx2(q, head_dim, spans, n_spans, scale, out);
  } else {
    AttendF16Scalar(q, head_dim, spans, n_spans, scale, out);
  }
}

void AttentionWeightsF16(const float* q, int head_dim, const KvSpan* spans, int n_spans,
                         float scale, float* weights) {
  int64_t n = 0;
  float max = -INFINITY;
  for (int sp = 0; sp < n_spans; ++sp) {
    for (int64_t j = 0; j < spans[sp].n_rows; ++j, ++n) {
      weights[n] = scale * ScoreScalar(q, spans[sp].k + j * spans[sp].stride, head_dim);
      max = std::fmax(max, weights[n]);
    }
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    weights[i] = std::exp(weights[i] - max);
    sum += static_cast<double>(weights[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) weights[i] *= inv;
}

}  // namespace kvmem::kernels
