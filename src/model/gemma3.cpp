// Gemma-3 (text): the pre-norm block with QK-norm and NEOX RoPE, plus
//  - token embeddings scaled by sqrt(n_embd) (in f32, as llama.cpp does);
//  - RMSNorm of each sub-layer's output before its residual add (post_attention_norm,
//    post_ffw_norm); the GGUF converter already stored every norm weight as Gemma's 1 + w;
//  - GeGLU FFN: gelu_tanh(x W_gate^T) * (x W_up^T);
//  - linear rope scaling (Gemma 3 4B, 12B, 27B: factor 8) on the global layers only, as
//    llama.cpp applies it (rope_freq_scale_train_swa = 1): local layers keep scale 1;
//  - interleaved attention: five local layers, whose tokens read only the last
//    attention.sliding_window positions and are rotated with RoPE base 10000, then one global
//    layer (layer % 6 == 5) rotated with rope.freq_base. Gemma-3 GGUFs store neither the pattern
//    nor the local base (llama.cpp: set_swa_pattern(6), rope_freq_base_train_swa = 10000), so
//    the pattern is the family's constant and rope.freq_base_swa, when present, overrides the
//    local base;
//  - attention logits scaled by 1/sqrt(query_pre_attn_scalar): the head size, except for the
//    27B model (62 layers) whose checkpoint sets n_embd / n_heads (gemma_pytorch config.py; no
//    GGUF key carries it, llama.cpp also decides by the layer count);
//  - the vision tower of single-file multimodal GGUFs (v.*, mm.* tensors, gemma3.vision.* and
//    gemma3.mm.* keys) ignored on purpose and said so: kvmem serves the text model;
//  - tied LM head, and final logit softcapping only when final_logit_softcapping is present
//    (Gemma-2 had it; Gemma-3 GGUFs do not).
#include <cmath>
#include <string>

#include "model/architecture.h"

namespace kvmem::model {
namespace {

using gguf::Key;

constexpr int kSwaPattern = 6;  // layers il % 6 == 5 are global
constexpr float kLocalRopeBase = 10000.0f;
constexpr int kLayers27B = 62;

Status ReadGemma3Hparams(const gguf::GgufFile& f, ModelSpec* s) {
  KVMEM_ASSIGN_OR_RETURN(int64_t window, f.GetInt(Key::kSlidingWindow));
  if (window < 0 || window > (int64_t{1} << 24)) {
    return Corrupt("metadata '" + f.Name(Key::kSlidingWindow) + "' = " + std::to_string(window) +
                   " is outside [0, 2^24]");
  }
  KVMEM_ASSIGN_OR_RETURN(float local_base, f.GetFloatOr(Key::kRopeFreqBaseSwa, kLocalRopeBase));
  if (!(local_base > 1.0f) || !std::isfinite(local_base)) {
    return Corrupt("metadata '" + f.Name(Key::kRopeFreqBaseSwa) + "' must be a finite number > 1");
  }
  // window 0: no sliding window, every layer global (llama.cpp's LLAMA_SWA_TYPE_NONE).
  for (int l = 0; l < s->n_layers && window > 0; ++l) {
    if (l % kSwaPattern != kSwaPattern - 1) {
      s->layers[l].rope_freq_base = local_base;
      s->layers[l].sliding_window = static_cast<int>(window);
    }
  }
  KVMEM_ASSIGN_OR_RETURN(s->final_logit_softcap, f.GetFloatOr(Key::kFinalLogitSoftcapping, 0.0f));
  if (!(s->final_logit_softcap >= 0.0f) || !std::isfinite(s->final_logit_softcap)) {
    return Corrupt("metadata '" + f.Name(Key::kFinalLogitSoftcapping) +
                   "' must be a finite number >= 0");
  }
  s->embd_scale = std::sqrt(static_cast<float>(s->n_embd));
  s->query_pre_attn_scalar = s->n_layers == kLayers27B ? static_cast<float>(s->n_embd / s->n_heads)
                                                       : static_cast<float>(s->head_dim_k);
  return Status::Ok();
}

}  // namespace

constexpr Key kGemma3Keys[] = {Key::kSlidingWindow, Key::kRopeFreqBaseSwa,
                               Key::kFinalLogitSoftcapping};
// Single-file multimodal Gemma 3 GGUFs (Ollama's) carry the SigLIP vision tower and its
// projector; kvmem runs the text model, which does not read them.
constexpr std::string_view kGemma3Vision[] = {"v.", "mm.", "vision."};

const Architecture& Gemma3Architecture() {
  static constexpr Architecture kArch{
      .arch = Arch::kGemma3,
      .gguf_name = "gemma3",
      .rope_mode = kernels::RopeMode::kNeox,
      .qkv_bias = false,
      .qk_norm = true,
      .post_norms = true,
      .ffn_act = FfnActivation::kGeluTanh,
      .read_hparams = &ReadGemma3Hparams,
      .family_keys = kGemma3Keys,
      .ignored_prefixes = kGemma3Vision,
  };
  return kArch;
}

}  // namespace kvmem::model
