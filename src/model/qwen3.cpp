// Qwen3: no projection biases; instead an RMSNorm over each Q and K head (weights of head_dim)
// before RoPE, NEOX-style rotation, and a head size given by attention.key_length that need not
// equal n_embd / n_heads. Qwen3-MoE (30B-A3B, 235B-A22B) is the same block with a mixture of
// experts for the FFN: softmax router, top expert_used_count of expert_count, their weights
// renormalized to sum to 1 (llama.cpp's qwen3moe: norm_w true, no weight scale, no shared
// expert).
#include "model/architecture.h"

namespace kvmem::model {

const Architecture& Qwen3Architecture() {
  static constexpr Architecture kArch{
      .arch = Arch::kQwen3,
      .gguf_name = "qwen3",
      .rope_mode = kernels::RopeMode::kNeox,
      .qkv_bias = false,
      .qk_norm = true,
      .post_norms = false,
      .ffn_act = FfnActivation::kSilu,
      .read_hparams = nullptr,
  };
  return kArch;
}

constexpr gguf::Key kQwen3MoeKeys[] = {gguf::Key::kExpertCount, gguf::Key::kExpertUsedCount,
                                       gguf::Key::kExpertFeedForwardLength};

const Architecture& Qwen3MoeArchitecture() {
  static constexpr Architecture kArch{
      .arch = Arch::kQwen3Moe,
      .gguf_name = "qwen3moe",
      .rope_mode = kernels::RopeMode::kNeox,
      .qkv_bias = false,
      .qk_norm = true,
      .post_norms = false,
      .ffn_act = FfnActivation::kSilu,
      .moe = true,
      .read_hparams = nullptr,
      .family_keys = kQwen3MoeKeys,
  };
  return kArch;
}

}  // namespace kvmem::model
