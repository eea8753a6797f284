// What distinguishes one llama-like family from another, as data. Each family's file
// (llama.cpp, qwen2.cpp, qwen3.cpp, gemma3.cpp) defines one Architecture; the shared loader and
// transformer block read these fields instead of branching on the family. Thread-safe
// (constants).
#pragma once

#include <span>
#include <string_view>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_keys.h"
#include "kernels/ops.h"
#include "model/model_spec.h"

namespace kvmem::model {

struct Architecture {
  Arch arch;
  std::string_view gguf_name;  // general.architecture
  kernels::RopeMode rope_mode;
  bool qkv_bias;    // blk.N.attn_{q,k,v}.bias
  bool qk_norm;     // blk.N.attn_{q,k}_norm.weight, RMSNorm per head before RoPE
  bool post_norms;  // blk.N.post_attention_norm / post_ffw_norm on the sub-layer outputs
  FfnActivation ffn_act;
  // Optional rope_freqs.weight: per-pair frequency factors on every layer (Llama 3.1+).
  bool rope_freqs = false;
  // Rope scaling applies to the sliding-window layers too (GPT-OSS; Gemma-3 keeps them at 1).
  bool scale_local_layers = false;
  // The FFN is a mixture of experts (ModelSpec::n_expert): router ffn_gate_inp, experts
  // ffn_{gate,up,down}_exps, counts from {arch}.expert_count / expert_used_count /
  // expert_feed_forward_length.
  bool moe = false;
  ExpertGating expert_gating = ExpertGating::kSoftmaxNormalized;
  // GPT-OSS: attn_output.bias, the router's and experts' biases (ffn_gate_inp.bias,
  // ffn_{gate,up,down}_exps.bias), blk.N.attn_sinks.weight.
  bool attn_out_bias = false;
  bool moe_bias = false;
  bool attn_sinks = false;
  // The tensor of the norm before the FFN: blk.N.<ffn_norm>.weight (GPT-OSS calls it
  // post_attention_norm).
  std::string_view ffn_norm = "ffn_norm";
  // Reads the family's hyper-parameters beyond the shared ones (per-layer windows and RoPE
  // bases, embedding and query scales, softcapping) into a spec whose shared fields are set and
  // whose layers are all global at rope.freq_base. nullptr: nothing more.
  Status (*read_hparams)(const gguf::GgufFile& f, ModelSpec* s);
  // The family-namespace keys read_hparams reads (math_keys.h refuses other math-bearing ones).
  std::span<const gguf::Key> family_keys = {};
  // Parts of a file ignored on purpose, said so at load (Model::load_note): tensors whose name
  // starts with one of these, and family-namespace keys "{arch}.<prefix>..." (Gemma 3 4B+ files
  // that carry the vision tower: "v." and "mm." tensors, "vision." and "mm." keys).
  std::span<const std::string_view> ignored_prefixes = {};
};

const Architecture& LlamaArchitecture();
const Architecture& Qwen2Architecture();
const Architecture& Qwen3Architecture();
const Architecture& Qwen3MoeArchitecture();
const Architecture& Gemma3Architecture();
const Architecture& GptOssArchitecture();

// All supported families, for lookup by general.architecture.
std::span<const Architecture* const> SupportedArchitectures();

}  // namespace kvmem::model
