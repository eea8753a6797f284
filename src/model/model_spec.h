// The geometry and hyper-parameters of a model, read from GGUF metadata by the architecture's
// loader. Everything the forward pass needs to know about a family lives here as data (flags and
// numbers), so the shared transformer block has no per-family branches beyond these fields.
// Thread-safe: a plain value.
#pragma once

#include <string>

#include "kernels/ops.h"

namespace kvmem::model {

enum class Arch { kLlama, kQwen2, kQwen3 };

struct ModelSpec {
  Arch arch = Arch::kLlama;
  std::string arch_name;  // as in GGUF general.architecture
  std::string name;       // general.name, for display

  int n_layers = 0;
  int n_embd = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim_k = 0;  // key/query head size ({arch}.attention.key_length, else n_embd / n_heads)
  int head_dim_v = 0;
  int n_ff = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;

  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  int rope_dim = 0;  // dims of each head that RoPE rotates
  kernels::RopeMode rope_mode = kernels::RopeMode::kNormal;

  bool qkv_bias = false;  // qwen2
  bool qk_norm = false;   // qwen3: RMSNorm over each Q and K head before RoPE
  bool tied_output = false;

  float attn_scale() const;  // 1/sqrt(head_dim_k)
  int q_dim() const { return n_heads * head_dim_k; }
  int k_dim() const { return n_kv_heads * head_dim_k; }
  int v_dim() const { return n_kv_heads * head_dim_v; }
};

const char* ArchName(Arch arch);

}  // namespace kvmem::model
