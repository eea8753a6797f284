// The geometry and hyper-parameters of a model, read from GGUF metadata by the architecture's
// loader. Everything the forward pass needs to know about a family lives here as data (flags and
// numbers, per model and per layer), so the shared transformer block has no per-family branches
// beyond these fields. Thread-safe: a plain value.
#pragma once

#include <string>
#include <vector>

#include "kernels/ops.h"

namespace kvmem::model {

enum class Arch { kLlama, kQwen2, kQwen3, kQwen3Moe, kGemma3, kGptOss };

// The gated FFN's activation: act(x W_gate^T) * (x W_up^T).
enum class FfnActivation {
  kSilu,      // SwiGLU (llama, qwen)
  kGeluTanh,  // GeGLU with the tanh approximation of GELU (gemma)
  // GPT-OSS's experts (ggml's swiglu_oai): g = min(gate, 7), u = clamp(up, -7, 7),
  // out = g * sigmoid(1.702 g) * (u + 1).
  kSwigluOai,
};

// How the router's logits become the chosen experts' weights (experts: the n_expert_used
// largest logits, lower index on ties).
enum class ExpertGating {
  // qwen3moe: p = softmax(all logits), weights p_e / max(sum of the chosen p, 2^-14).
  kSoftmaxNormalized,
  // GPT-OSS: weights = softmax over the chosen logits alone (ggml's SOFTMAX_WEIGHT).
  kSoftmaxOfChosen,
};

// What differs between layers: Gemma-3 interleaves local (sliding-window) layers, rotated with
// their own RoPE base, with global ones.
struct LayerSpec {
  float rope_freq_base = 10000.0f;
  // 0: global (a token reads every earlier row). W > 0: a token at position p reads only rows at
  // positions p - W < pos <= p (llama.cpp's LLAMA_SWA_TYPE_STANDARD), i.e. W rows with its own.
  int sliding_window = 0;
  // Rope scaling of the angles: linear (freq_scale = 1 / rope.scaling.factor) or YaRN (with the
  // correction dims of this layer's base). Gemma-3 scales its global layers only (llama.cpp's
  // rope_freq_scale_train_swa = 1).
  kernels::RopeScaling rope_scaling = {};
  // Q and K leave RoPE times this: rope.scaling.attn_factor, and under YaRN
  // 1 + 0.1 ln(1 / freq_scale) as well (llama.cpp's net mscale).
  float rope_magnitude = 1.0f;
};

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
  float rope_freq_base = 10000.0f;  // {arch}.rope.freq_base: the global layers' base
  int rope_dim = 0;                 // dims of each head that RoPE rotates
  // (rope_dim / 2) per-pair frequency factors (Llama 3.1+'s rope_freqs.weight: each pair's
  // angle divided by its factor, every layer); empty: none.
  std::vector<float> rope_freq_factors;
  kernels::RopeMode rope_mode = kernels::RopeMode::kNormal;
  std::vector<LayerSpec> layers;  // (n_layers)

  bool qkv_bias = false;    // qwen2
  bool qk_norm = false;     // qwen3, gemma3: RMSNorm over each Q and K head before RoPE
  bool post_norms = false;  // gemma3: RMSNorm of the attention and FFN outputs before each add
  FfnActivation ffn_act = FfnActivation::kSilu;
  bool tied_output = false;

  // Mixture of experts (qwen3moe, GPT-OSS): n_expert > 0 replaces the dense FFN in every layer.
  // A router picks each token's n_expert_used experts, whose gated FFNs (n_ff_exp wide, ffn_act)
  // are summed with the weights of expert_gating.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  ExpertGating expert_gating = ExpertGating::kSoftmaxNormalized;
  // GPT-OSS: biases on the attention output, the router and the experts' three projections, and
  // a learned attention sink per query head (kernels::Attend's sink).
  bool attn_out_bias = false;
  bool moe_bias = false;
  bool attn_sinks = false;

  float embd_scale = 1.0f;  // token embeddings are multiplied by this (gemma3: sqrt(n_embd))
  // Attention logits are q.k / sqrt(query_pre_attn_scalar); 0 means head_dim_k.
  float query_pre_attn_scalar = 0.0f;
  float final_logit_softcap = 0.0f;  // > 0: logits = c * tanh(logits / c)

  float attn_scale() const;  // 1/sqrt(query_pre_attn_scalar, or head_dim_k)
  // FFN weights one token multiplies by in a layer: gate, up and down (3 n_embd n_ff), or the
  // router and its n_expert_used experts' (n_embd n_expert + n_expert_used 3 n_embd n_ff_exp).
  int64_t ffn_params_per_token() const;
  int q_dim() const { return n_heads * head_dim_k; }
  int k_dim() const { return n_kv_heads * head_dim_k; }
  int v_dim() const { return n_kv_heads * head_dim_v; }
};

const char* ArchName(Arch arch);

}  // namespace kvmem::model
