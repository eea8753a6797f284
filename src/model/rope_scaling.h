// Reads a file's rope scaling (rope.scaling.type none, linear or yarn, its factor, original
// context length and attn_factor) into each layer's LayerSpec::rope_scaling and rope_magnitude,
// as llama.cpp's llama_context sets ggml_rope_ext's parameters: YaRN mixes with ext_factor 1 and
// beta_fast 32, beta_slow 1 (llama.cpp reads no per-file betas for these families), its
// correction dims computed from each layer's own RoPE base. Thread-safe (pure).
#pragma once

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "model/model_spec.h"

namespace kvmem::model {

// s: a spec whose rope_dim, n_ctx_train and per-layer bases and windows are set. Sliding-window
// layers are scaled too only when scale_local_layers (llama.cpp's rope_freq_scale_train_swa =
// rope_freq_scale_train: GPT-OSS; Gemma-3 keeps its local layers at scale 1).
Status ReadRopeScaling(const gguf::GgufFile& f, bool scale_local_layers, ModelSpec* s);

// ggml_rope_yarn_corr_dims: the pairs [low, high] between which YaRN ramps from extrapolation
// to interpolation, for a context of n_ctx_orig positions.
void YarnCorrDims(int rot_dim, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                  float* low, float* high);

}  // namespace kvmem::model
