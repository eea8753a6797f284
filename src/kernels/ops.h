// Float kernels of the transformer block: norms, activations, softmax, RoPE. One table per ISA;
// the scalar table is the reference the others are tested against. Thread-safe: pure functions.
//
// Numerics follow ggml's CPU backend so logits stay close to llama.cpp's:
//  - rms_norm: squares in float, summed in double; scale = 1 / sqrtf(mean + eps); y = x*scale*w.
//  - softmax: max-subtracted, exp in float, sum in double, one float reciprocal multiply.
//  - silu(a) = a / (1 + exp(-a)); the AVX2 table's exp is a vector expf within 1 ulp.
//  - gelu is the tanh approximation 0.5 a (1 + tanh(y)), y = sqrt(2/pi) (a + 0.044715 a^3),
//    evaluated as a / (1 + exp(-2y)), which is the same function without the cancellation in
//    1 + tanh(y) for negative a. (ggml's CPU build reads gelu from an f16-indexed table, which
//    is coarser than either.)
//  - RoPE angles as ggml_rope_cache_init: theta = pos, theta *= powf(base, -2/rot_dim) per pair.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu_features.h"

namespace kvmem::kernels {

// How RoPE pairs dimensions: kNormal rotates (x[2i], x[2i+1]) (llama GGUF, whose converter
// permutes Q/K), kNeox rotates (x[i], x[i + rot_dim/2]) (qwen2, qwen3, gemma3).
enum class RopeMode { kNormal = 0, kNeox = 2 };

struct OpsTable {
  // Rotates the first rot_dim dims of each of n_heads vectors of x (n_heads, head_dim) by the
  // angles whose cos/sin are given per pair: (rot_dim / 2) each. The kernel behind Rope().
  void (*rope_rotate)(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_t,
                      const float* sin_t, RopeMode mode);
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
  // y = exp(x) elementwise (the exp used by swiglu/geglu/softmax); y may alias x.
  void (*exp)(const float* x, float* y, int64_t n);
};

const OpsTable& GetOps(Isa isa);
inline const OpsTable& Ops() { return GetOps(ActiveIsa()); }

// How RoPE's angles are stretched beyond freq_base and the frequency factors, as ggml_rope_ext's
// freq_scale, ext_factor and corr_dims. Pair i's extrapolated angle is
// e_i = pos * freq_base^(-2i/rot_dim) / freq_factors[i] and its interpolated angle freq_scale * e_i;
// the angle used is the interpolated one, except under YaRN (ext_factor > 0), where it is
// mixed back toward e_i by ramp_i * ext_factor, ramp_i = 1 - clamp((i - corr_low) /
// max(0.001, corr_high - corr_low), 0, 1): the fast pairs (below corr_low) keep e_i, the slow ones
// (above corr_high) are interpolated. Every angle stays linear in pos, so rotations compose.
struct RopeScaling {
  float freq_scale = 1.0f;  // 1 / rope.scaling.factor (linear and YaRN)
  float ext_factor = 0.0f;  // 0: no YaRN mixing; 1: YaRN
  float corr_low = 0.0f;    // ggml_rope_yarn_corr_dims
  float corr_high = 0.0f;
};

// Rotates the first rot_dim dims of each of n_heads vectors (head_dim apart) in x by the angles
// of RopeScaling (freq_factors: null, or (rot_dim / 2) of them: Llama 3.1's rope_freqs). pos may
// be negative (un-rotation) so that stored keys can be re-rotated to new positions: Rope(p2)
// after Rope(p1) == Rope(p1 + p2) up to float rounding. Dims rot_dim..head_dim-1 are unchanged.
// rot_dim is even and <= head_dim. x: (n_heads, head_dim).
void Rope(float* x, int n_heads, int head_dim, int rot_dim, int64_t pos, float freq_base,
          RopeMode mode, const float* freq_factors = nullptr, const RopeScaling& scaling = {});

// cos and sin of the RoPE angles of one position, so that many heads (Q and K of a token, or a
// batch of stored keys shifted by the same delta) share one evaluation of cosf/sinf.
struct RopeCache {
  int rot_dim = 0;
  int64_t pos = 0;
  std::vector<float> cos;  // (rot_dim / 2)
  std::vector<float> sin;  // (rot_dim / 2)
};

// Fills `cache` for `pos`; reuses its buffers, so refilling a cache of the same rot_dim does not
// allocate. magnitude multiplies cos and sin (YaRN's attention factor, which the forward pass
// applies to Q and K as ggml's mscale; re-rotations of stored vectors use 1).
void InitRopeCache(int64_t pos, int rot_dim, float freq_base, RopeCache* cache,
                   const float* freq_factors = nullptr, const RopeScaling& scaling = {},
                   float magnitude = 1.0f);

// Rope() with the angles of `cache` (rot_dim = cache.rot_dim). x: (n_heads, head_dim).
void RopeWithCache(float* x, int n_heads, int head_dim, const RopeCache& cache, RopeMode mode);

}  // namespace kvmem::kernels
