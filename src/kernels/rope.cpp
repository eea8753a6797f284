// Rotary position embedding (ops.h), with angles computed exactly as ggml_rope_cache_init and
// rope_yarn do: theta = pos, then theta *= theta_scale per pair, in float; each pair's
// extrapolated angle is theta divided by its frequency factor when there are any (Llama 3.1's
// rope_freqs, as ggml_rope_ext's freq_factors), its interpolated angle that times freq_scale
// (linear and YaRN scaling: 1 / rope.scaling.factor), and under YaRN the two are mixed by the
// ramp of RopeScaling. The rotation itself is OpsTable::rope_rotate (scalar here, AVX2 in
// rope_avx2.cpp); cosf/sinf are amortized over heads by RopeCache.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>

#include "kernels/ops.h"
#include "kernels/ops_internal.h"

namespace kvmem::kernels {
namespace {

// ggml's rope_yarn_ramp: 1 for the pairs below low, 0 above high, linear between.
float YarnRamp(float low, float high, int pair) {
  const float y = (static_cast<float>(pair) - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

// Fills cos/sin (times magnitude) for pairs 0..n_pairs-1.
void Angles(int64_t pos, int rot_dim, float freq_base, const float* freq_factors,
            const RopeScaling& scaling, float magnitude, float* cos_out, float* sin_out) {
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(rot_dim));
  float theta = static_cast<float>(pos);
  for (int i = 0; i < rot_dim / 2; ++i) {
    const float extrap = freq_factors != nullptr ? theta / freq_factors[i] : theta;
    const float interp = scaling.freq_scale * extrap;
    float angle = interp;
    if (scaling.ext_factor != 0.0f) {
      const float mix = YarnRamp(scaling.corr_low, scaling.corr_high, i) * scaling.ext_factor;
      angle = interp * (1.0f - mix) + extrap * mix;
    }
    cos_out[i] = std::cos(angle) * magnitude;
    sin_out[i] = std::sin(angle) * magnitude;
    theta *= theta_scale;
  }
}

}  // namespace

void RopeRotateScalar(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_t,
                      const float* sin_t, RopeMode mode) {
  assert(rot_dim % 2 == 0 && rot_dim <= head_dim);
  const int half = rot_dim / 2;
  // Pair i is (x[i0], x[i1]): i0 = 2i, i1 = 2i + 1 (normal) or i0 = i, i1 = i + half (neox).
  const int step = mode == RopeMode::kNeox ? 1 : 2;
  const int other = mode == RopeMode::kNeox ? half : 1;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      float* p0 = v + i * step;
      float* p1 = p0 + other;
      const float x0 = *p0;
      const float x1 = *p1;
      *p0 = x0 * cos_t[i] - x1 * sin_t[i];
      *p1 = x0 * sin_t[i] + x1 * cos_t[i];
    }
  }
}

void InitRopeCache(int64_t pos, int rot_dim, float freq_base, RopeCache* cache,
                   const float* freq_factors, const RopeScaling& scaling, float magnitude) {
  cache->rot_dim = rot_dim;
  cache->pos = pos;
  cache->cos.resize(rot_dim / 2);
  cache->sin.resize(rot_dim / 2);
  Angles(pos, rot_dim, freq_base, freq_factors, scaling, magnitude, cache->cos.data(),
         cache->sin.data());
}

void RopeWithCache(float* x, int n_heads, int head_dim, const RopeCache& cache, RopeMode mode) {
  Ops().rope_rotate(x, n_heads, head_dim, cache.rot_dim, cache.cos.data(), cache.sin.data(), mode);
}

void Rope(float* x, int n_heads, int head_dim, int rot_dim, int64_t pos, float freq_base,
          RopeMode mode, const float* freq_factors, const RopeScaling& scaling) {
  constexpr int kMaxStackPairs = 256;
  if (rot_dim / 2 > kMaxStackPairs) {
    RopeCache cache;
    InitRopeCache(pos, rot_dim, freq_base, &cache, freq_factors, scaling);
    RopeWithCache(x, n_heads, head_dim, cache, mode);
    return;
  }
  float cos_t[kMaxStackPairs];
  float sin_t[kMaxStackPairs];
  Angles(pos, rot_dim, freq_base, freq_factors, scaling, 1.0f, cos_t, sin_t);
  Ops().rope_rotate(x, n_heads, head_dim, rot_dim, cos_t, sin_t, mode);
}

}  // namespace kvmem::kernels
