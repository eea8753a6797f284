// GPT-OSS (gpt-oss-20b, gpt-oss-120b; llama.cpp's openai-moe), as llama.cpp computes it:
//  - attention with biases on Q, K, V and the output, NEOX RoPE with YaRN on every layer (the
//    sliding-window ones too: rope_freq_scale_train_swa = rope_freq_scale_train), scores scaled
//    by 1/sqrt(head size), and a learned sink per query head (blk.N.attn_sinks.weight) in the
//    softmax's denominator;
//  - sliding-window attention (attention.sliding_window, 128) on the even layers, full on the
//    odd ones (llama.cpp's swa pattern 2); rope.freq_base_swa, when present, for the former;
//  - the FFN norm stored as post_attention_norm; a mixture of experts: router with a bias, the
//    expert_used_count largest logits, their weights a softmax over those logits alone; experts
//    with biases, MXFP4 weights in the released files, and the clamped SwiGLU of swiglu_oai;
//  - an untied LM head.
#include <cmath>
#include <string>

#include "model/architecture.h"

namespace kvmem::model {
namespace {

using gguf::Key;

constexpr int kSwaPattern = 2;  // layers il % 2 == 0 slide

Status ReadGptOssHparams(const gguf::GgufFile& f, ModelSpec* s) {
  KVMEM_ASSIGN_OR_RETURN(int64_t window, f.GetInt(Key::kSlidingWindow));
  if (window <= 0 || window > (int64_t{1} << 24)) {
    return Corrupt("metadata '" + f.Name(Key::kSlidingWindow) + "' = " + std::to_string(window) +
                   " is outside [1, 2^24]");
  }
  KVMEM_ASSIGN_OR_RETURN(float local_base, f.GetFloatOr(Key::kRopeFreqBaseSwa, s->rope_freq_base));
  if (!(local_base > 1.0f) || !std::isfinite(local_base)) {
    return Corrupt("metadata '" + f.Name(Key::kRopeFreqBaseSwa) + "' must be a finite number > 1");
  }
  for (int l = 0; l < s->n_layers; ++l) {
    if (l % kSwaPattern < kSwaPattern - 1) {
      s->layers[l].rope_freq_base = local_base;
      s->layers[l].sliding_window = static_cast<int>(window);
    }
  }
  return Status::Ok();
}

constexpr Key kGptOssKeys[] = {Key::kSlidingWindow, Key::kRopeFreqBaseSwa, Key::kExpertCount,
                               Key::kExpertUsedCount, Key::kExpertFeedForwardLength};

}  // namespace

const Architecture& GptOssArchitecture() {
  static constexpr Architecture kArch{
      .arch = Arch::kGptOss,
      .gguf_name = "gpt-oss",
      .rope_mode = kernels::RopeMode::kNeox,
      .qkv_bias = true,
      .qk_norm = false,
      .post_norms = false,
      .ffn_act = FfnActivation::kSwigluOai,
      .scale_local_layers = true,
      .moe = true,
      .expert_gating = ExpertGating::kSoftmaxOfChosen,
      .attn_out_bias = true,
      .moe_bias = true,
      .attn_sinks = true,
      .ffn_norm = "post_attention_norm",
      .read_hparams = &ReadGptOssHparams,
      .family_keys = kGptOssKeys,
  };
  return kArch;
}

}  // namespace kvmem::model
