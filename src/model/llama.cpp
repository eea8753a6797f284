// Llama family (Llama 2/3, SmolLM2, Mistral-style GGUFs): pre-norm RMSNorm blocks, SwiGLU FFN,
// GQA, RoPE on adjacent dimension pairs — llama.cpp's converter permutes the rows of Q and K so
// the original half-split rotation becomes the "normal" pairing — no biases, optional tied LM
// head (SmolLM2 ties it to token_embd), and Llama 3.1+'s rope_freqs.weight frequency factors when
// the file carries them.
#include "model/architecture.h"

namespace kvmem::model {

const Architecture& LlamaArchitecture() {
  static constexpr Architecture kArch{
      .arch = Arch::kLlama,
      .gguf_name = "llama",
      .rope_mode = kernels::RopeMode::kNormal,
      .qkv_bias = false,
      .qk_norm = false,
      .post_norms = false,
      .ffn_act = FfnActivation::kSilu,
      .rope_freqs = true,
      .read_hparams = nullptr,
  };
  return kArch;
}

}  // namespace kvmem::model
