#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace kvmem::model {
namespace {

using gguf::Key;

constexpr float kYarnBetaFast = 32.0f;
constexpr float kYarnBetaSlow = 1.0f;

float YarnCorrDim(int rot_dim, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(rot_dim) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2 * std::numbers::pi_v<float>)) /
         (2 * std::log(base));
}

// llama.cpp's get_mscale(scale, 1): YaRN's attention temperature for a stretch of `scale`.
float YarnMscale(float scale) { return scale <= 1.0f ? 1.0f : 0.1f * std::log(scale) + 1.0f; }

Status FiniteAtLeast(const gguf::GgufFile& f, Key key, float v, float min) {
  if (!(v >= min) || !std::isfinite(v)) {
    return Corrupt("metadata '" + f.Name(key) +
                   "' must be a finite number >= " + std::to_string(min));
  }
  return Status::Ok();
}

}  // namespace

void YarnCorrDims(int rot_dim, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                  float* low, float* high) {
  const float start = std::floor(YarnCorrDim(rot_dim, n_ctx_orig, beta_fast, freq_base));
  const float end = std::ceil(YarnCorrDim(rot_dim, n_ctx_orig, beta_slow, freq_base));
  *low = std::max(0.0f, start);
  *high = std::min(static_cast<float>(rot_dim - 1), end);
}

Status ReadRopeScaling(const gguf::GgufFile& f, bool scale_local_layers, ModelSpec* s) {
  KVMEM_ASSIGN_OR_RETURN(std::string_view type, f.GetStringOr(Key::kRopeScalingType, "none"));
  const bool yarn = type == "yarn";
  if (!yarn && type != "linear" && type != "none" && !type.empty()) {
    return Unsupported("rope scaling '" + std::string(type) + "' (kvmem reads none, linear, yarn)");
  }
  float freq_scale = 1.0f;
  if (type == "linear" || yarn) {
    KVMEM_ASSIGN_OR_RETURN(float factor, f.GetFloat(Key::kRopeScalingFactor));
    KVMEM_RETURN_IF_ERROR(FiniteAtLeast(f, Key::kRopeScalingFactor, factor, 0.0f));
    freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;  // llama.cpp: 0 means none
  }
  KVMEM_ASSIGN_OR_RETURN(float attn_factor, f.GetFloatOr(Key::kRopeScalingAttnFactor, 1.0f));
  KVMEM_RETURN_IF_ERROR(FiniteAtLeast(f, Key::kRopeScalingAttnFactor, attn_factor, 0.0f));
  KVMEM_ASSIGN_OR_RETURN(int64_t n_ctx_orig,
                         f.GetIntOr(Key::kRopeScalingOrigContextLength, s->n_ctx_train));
  if (n_ctx_orig <= 0 || n_ctx_orig > (int64_t{1} << 24)) {
    return Corrupt("metadata '" + f.Name(Key::kRopeScalingOrigContextLength) +
                   "' is outside [1, 2^24]");
  }
  // llama.cpp sets the attention factor so that ggml's own YaRN mscale, 1 + 0.1 ln(1 /
  // freq_scale) per layer, nets to get_mscale(factor) on the scaled layers.
  float base_magnitude = attn_factor;
  if (yarn) {
    const float factor = 1.0f / freq_scale;
    base_magnitude *= YarnMscale(factor) / (1.0f + 0.1f * std::log(factor));
  }
  for (LayerSpec& l : s->layers) {
    const float fs = l.sliding_window > 0 && !scale_local_layers ? 1.0f : freq_scale;
    l.rope_scaling = {.freq_scale = fs, .ext_factor = 0.0f, .corr_low = 0.0f, .corr_high = 0.0f};
    l.rope_magnitude = base_magnitude;
    if (yarn) {
      l.rope_scaling.ext_factor = 1.0f;
      YarnCorrDims(s->rope_dim, static_cast<int>(n_ctx_orig), l.rope_freq_base, kYarnBetaFast,
                   kYarnBetaSlow, &l.rope_scaling.corr_low, &l.rope_scaling.corr_high);
      l.rope_magnitude *= 1.0f + 0.1f * std::log(1.0f / fs);
    }
  }
  return Status::Ok();
}

}  // namespace kvmem::model
