// The reference OpsTable: plain loops in the order and precision ggml's CPU backend uses, which
// every SIMD table is tested against.
#include <cmath>
#include <cstdint>

#include "kernels/ops.h"
#include "kernels/ops_internal.h"

namespace kvmem::kernels {
namespace {

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = n > 0 ? static_cast<float>(sum / static_cast<double>(n)) : 0.0f;
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w == nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  }
}

float Silu(float a) { return a / (1.0f + std::exp(-a)); }

// 0.5 a (1 + tanh(y)) == a / (1 + exp(-2y)), y = sqrt(2/pi) (a + 0.044715 a^3).
float GeluTanh(float a) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  constexpr float kCoef = 0.044715f;
  const float y = kSqrt2OverPi * a * (1.0f + kCoef * a * a);
  return a / (1.0f + std::exp(-2.0f * y));
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

void GeGlu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = GeluTanh(gate[i]) * up[i];
}

void Softmax(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float Dot(const float* x, const float* y, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

void Exp(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

}  // namespace

const OpsTable& ScalarOpsTable() {
  static constexpr OpsTable kTable = {
      .rope_rotate = RopeRotateScalar,
      .rms_norm = RmsNorm,
      .swiglu = SwiGlu,
      .geglu = GeGlu,
      .softmax = Softmax,
      .axpy = Axpy,
      .dot = Dot,
      .exp = Exp,
  };
  return kTable;
}

}  // namespace kvmem::kernels
