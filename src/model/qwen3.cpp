// Qwen3 (dense): no projection biases; instead an RMSNorm over each Q and K head (weights of
// head_dim) before RoPE, NEOX-style rotation, and a head size given by attention.key_length that
// need not equal n_embd / n_heads.
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

}  // namespace kvmem::model
