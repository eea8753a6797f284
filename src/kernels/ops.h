// Float kernels of the transformer block: norms, activations, softmax, RoPE. One table per ISA;
// the scalar table is the reference the others are tested against. Thread-safe: pure functions.
#pragma once

#include <cstdint>

#include "kernels/cpu_features.h"

namespace kvmem::kernels {

// How RoPE pairs dimensions: kNormal rotates (x[2i], x[2i+1]) (llama GGUF, whose converter
// permutes Q/K), kNeox rotates (x[i], x[i + rot_dim/2]) (qwen2, qwen3, gemma3).
enum class RopeMode { kNormal = 0, kNeox = 2 };

struct OpsTable {
  // y = x * w / sqrt(mean(x^2) + eps); y may alias x. w == nullptr means w = 1.
  void (*rms_norm)(const float* x, const float* w, float* y, int64_t n, float eps);
  // out = silu(gate) * up, silu(a) = a / (1 + exp(-a)); out may alias gate or up.
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
  // out = gelu_tanh(gate) * up (Gemma's GeGLU); out may alias gate or up.
  void (*geglu)(const float* gate, const float* up, float* out, int64_t n);
  // x = softmax(x) in place, max-subtracted; n >= 1.
  void (*softmax)(float* x, int64_t n);
  // y += a * x
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  // returns sum x[i] * y[i]
  float (*dot)(const float* x, const float* y, int64_t n);
};

const OpsTable& GetOps(Isa isa);
inline const OpsTable& Ops() { return GetOps(ActiveIsa()); }

// Rotates the first rot_dim dims of each of n_heads vectors (head_dim apart) in x by angle
// pos * theta_i, theta_i = freq_base^(-2i/rot_dim). pos may be negative (un-rotation) so that
// stored keys can be re-rotated to new positions: Rope(p2) after Rope(p1) == Rope(p1 + p2) up to
// float rounding.
void Rope(float* x, int n_heads, int head_dim, int rot_dim, int64_t pos, float freq_base,
          RopeMode mode);

}  // namespace kvmem::kernels
