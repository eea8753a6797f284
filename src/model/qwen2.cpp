// Qwen2 / Qwen2.5: the llama block with biases on the Q, K and V projections and RoPE on
// half-split dimension pairs (NEOX style, as the HF checkpoints are converted unpermuted).
#include "model/architecture.h"

namespace kvmem::model {

const Architecture& Qwen2Architecture() {
  static constexpr Architecture kArch{
      .arch = Arch::kQwen2,
      .gguf_name = "qwen2",
      .rope_mode = kernels::RopeMode::kNeox,
      .qkv_bias = true,
      .qk_norm = false,
      .post_norms = false,
      .ffn_act = FfnActivation::kSilu,
      .read_hparams = nullptr,
  };
  return kArch;
}

}  // namespace kvmem::model
