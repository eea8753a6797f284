#include <gtest/gtest.h>

#include <cmath>

#include "model/model.h"
#include "tiny_model.h"

namespace kvmem::model {
namespace {

using testing::BuildTinyGguf;
using testing::TempFile;
using testing::TinyConfig;

Result<std::unique_ptr<Model>> LoadTiny(const TinyConfig& c) {
  TempFile f(BuildTinyGguf(c));
  return Model::Load(f.path());
}

TEST(ModelLoad, ReadsGeometryPerArchitecture) {
  for (const char* arch : {"llama", "qwen2", "qwen3", "gemma3"}) {
    TinyConfig c;
    c.arch = arch;
    c.head_dim = 16;  // differs from n_embd / n_heads = 8
    auto m = LoadTiny(c);
    ASSERT_TRUE(m.ok()) << arch << ": " << m.status().ToString();
    const ModelSpec& s = (*m)->spec();
    EXPECT_EQ(s.arch_name, arch);
    EXPECT_EQ(s.n_layers, 2);
    EXPECT_EQ(s.head_dim_k, 16);
    EXPECT_EQ(s.n_vocab, 64);
    EXPECT_EQ(s.qkv_bias, std::string(arch) == "qwen2");
    EXPECT_EQ(s.qk_norm, std::string(arch) == "qwen3" || std::string(arch) == "gemma3");
    EXPECT_EQ(s.post_norms, std::string(arch) == "gemma3");
    ASSERT_EQ(s.layers.size(), 2u);
    EXPECT_EQ(s.rope_mode == kernels::RopeMode::kNeox, std::string(arch) != "llama");
    EXPECT_TRUE(s.tied_output);
  }
}

TEST(ModelLoad, LlamaLayersAreGlobalAtTheOneBase) {
  TinyConfig c;
  c.rope_base = 5e5f;
  auto m = LoadTiny(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelSpec& s = (*m)->spec();
  EXPECT_EQ(s.ffn_act, FfnActivation::kSilu);
  EXPECT_EQ(s.embd_scale, 1.0f);
  EXPECT_FLOAT_EQ(s.attn_scale(), 1.0f / std::sqrt(8.0f));
  EXPECT_EQ(s.final_logit_softcap, 0.0f);
  for (const LayerSpec& l : s.layers) {
    EXPECT_EQ(l.sliding_window, 0);
    EXPECT_EQ(l.rope_freq_base, 5e5f);
  }
}

TEST(ModelLoad, Gemma3InterleavesLocalAndGlobalLayers) {
  TinyConfig c;
  c.arch = "gemma3";
  c.n_layers = 13;
  c.head_dim = 16;
  c.n_kv_heads = 1;
  c.rope_base = 1e6f;
  c.sliding_window = 5;
  auto m = LoadTiny(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelSpec& s = (*m)->spec();
  EXPECT_EQ(s.arch, Arch::kGemma3);
  EXPECT_EQ(s.rope_mode, kernels::RopeMode::kNeox);
  EXPECT_TRUE(s.qk_norm);
  EXPECT_TRUE(s.post_norms);
  EXPECT_TRUE(s.tied_output);
  EXPECT_EQ(s.ffn_act, FfnActivation::kGeluTanh);
  EXPECT_FLOAT_EQ(s.embd_scale, std::sqrt(32.0f));
  EXPECT_FLOAT_EQ(s.attn_scale(), 1.0f / std::sqrt(16.0f));  // query_pre_attn_scalar = head size
  EXPECT_EQ(s.final_logit_softcap, 0.0f);
  EXPECT_EQ(s.rope_freq_base, 1e6f);
  ASSERT_EQ(s.layers.size(), 13u);
  const std::vector<kv::RopeSpec> rope = (*m)->rope_specs();
  ASSERT_EQ(rope.size(), 13u);
  for (int l = 0; l < 13; ++l) {
    const bool global = l == 5 || l == 11;  // every 6th layer
    EXPECT_EQ(s.layers[l].sliding_window, global ? 0 : 5) << "layer " << l;
    EXPECT_EQ(s.layers[l].rope_freq_base, global ? 1e6f : 1e4f) << "layer " << l;
    EXPECT_EQ(rope[l].freq_base, s.layers[l].rope_freq_base) << "layer " << l;
    EXPECT_EQ(rope[l].rot_dim, 16);
    EXPECT_EQ(rope[l].mode, kernels::RopeMode::kNeox);
    EXPECT_EQ((*m)->weights().layers[l].attn_post_norm.size(), 32u);
    EXPECT_EQ((*m)->weights().layers[l].ffn_post_norm.size(), 32u);
  }
}

TEST(ModelLoad, Gemma3OptionalKeys) {
  TinyConfig c;
  c.arch = "gemma3";
  c.n_layers = 6;
  c.rope_base_swa = 2e4f;
  c.final_logit_softcap = 30.0f;
  auto m = LoadTiny(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelSpec& s = (*m)->spec();
  EXPECT_EQ(s.final_logit_softcap, 30.0f);
  EXPECT_EQ(s.layers[0].rope_freq_base, 2e4f);
  EXPECT_EQ(s.layers[5].rope_freq_base, 10000.0f);  // TinyConfig's global base
  EXPECT_EQ(s.layers[5].sliding_window, 0);

  // A window of 0 turns the sliding window off: every layer global.
  c.sliding_window = 0;
  auto all_global = LoadTiny(c);
  ASSERT_TRUE(all_global.ok()) << all_global.status().ToString();
  for (const LayerSpec& l : (*all_global)->spec().layers) EXPECT_EQ(l.sliding_window, 0);
}

TEST(ModelLoad, UntiedOutputIsItsOwnMatrix) {
  TinyConfig c;
  c.tied = false;
  auto m = LoadTiny(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE((*m)->spec().tied_output);
  EXPECT_NE((*m)->weights().output.data, (*m)->weights().tok_embd.data);
}

struct BadCase {
  const char* name;
  TinyConfig config;
  ErrorCode code;
  const char* needle;
};

// Each case fails to load with its code, the message naming what is wrong.
void ExpectRefused(const std::vector<BadCase>& cases) {
  for (const BadCase& bc : cases) {
    auto m = LoadTiny(bc.config);
    ASSERT_FALSE(m.ok()) << bc.name;
    EXPECT_EQ(m.status().code(), bc.code) << bc.name << ": " << m.status().ToString();
    EXPECT_NE(m.status().message().find(bc.needle), std::string::npos)
        << bc.name << ": " << m.status().ToString();
  }
}

TEST(ModelLoad, BadModelsNameTheProblem) {
  std::vector<BadCase> cases;
  {
    TinyConfig c;
    c.skip_tensor = "blk.1.ffn_up.weight";
    cases.push_back({"missing tensor", c, ErrorCode::kNotFound, "blk.1.ffn_up.weight"});
  }
  {
    TinyConfig c;
    c.reshape_tensor = "blk.0.attn_k.weight";
    cases.push_back({"wrong shape", c, ErrorCode::kCorrupt, "blk.0.attn_k.weight"});
  }
  {
    TinyConfig c;
    c.arch = "qwen2";
    c.skip_tensor = "blk.0.attn_v.bias";
    cases.push_back({"qwen2 without bias", c, ErrorCode::kNotFound, "blk.0.attn_v.bias"});
  }
  {
    TinyConfig c;
    c.n_kv_heads = 3;
    cases.push_back({"heads not a multiple", c, ErrorCode::kCorrupt, "head_count_kv"});
  }
  {
    TinyConfig c;
    c.arch = "mamba";
    cases.push_back({"unknown architecture", c, ErrorCode::kUnsupported, "mamba"});
  }
  {
    TinyConfig c;
    c.arch = "gemma3";
    c.skip_key = "gemma3.attention.sliding_window";
    cases.push_back(
        {"gemma3 without window", c, ErrorCode::kNotFound, "gemma3.attention.sliding_window"});
  }
  {
    TinyConfig c;
    c.arch = "gemma3";
    c.skip_key = "gemma3.attention.layer_norm_rms_epsilon";
    cases.push_back({"gemma3 without rms eps", c, ErrorCode::kNotFound,
                     "gemma3.attention.layer_norm_rms_epsilon"});
  }
  {
    TinyConfig c;
    c.arch = "gemma3";
    c.sliding_window = -3;
    cases.push_back({"negative window", c, ErrorCode::kCorrupt, "sliding_window"});
  }
  {
    TinyConfig c;
    c.arch = "gemma3";
    c.skip_tensor = "blk.1.post_ffw_norm.weight";
    cases.push_back(
        {"gemma3 without post-FFN norm", c, ErrorCode::kNotFound, "blk.1.post_ffw_norm.weight"});
  }
  {
    TinyConfig c;
    c.arch = "gemma3";
    c.skip_tensor = "blk.0.post_attention_norm.weight";
    cases.push_back({"gemma3 without post-attention norm", c, ErrorCode::kNotFound,
                     "blk.0.post_attention_norm.weight"});
  }
  {
    TinyConfig c;
    c.arch = "gemma3";
    c.skip_tensor = "blk.1.attn_k_norm.weight";
    cases.push_back({"gemma3 without K norm", c, ErrorCode::kNotFound, "blk.1.attn_k_norm.weight"});
  }
  ExpectRefused(cases);
}

// Never a silent wrong answer: what a file carries that kvmem would not compute (rope
// frequency factors on a family without them, an MoE router, a scaling or soft-capping key it
// does not apply) is refused by name; informational and inert keys are not.
TEST(ModelLoad, WhatWouldChangeTheMathIsRefusedByName) {
  std::vector<BadCase> cases;
  {
    TinyConfig c;
    c.arch = "qwen2";  // llama reads them (Llama 3.1+); qwen2 files do not carry them
    c.extra_tensors = {{"rope_freqs.weight", {c.head_dim / 2}}};
    cases.push_back({"rope factors on qwen2", c, ErrorCode::kUnsupported, "'rope_freqs.weight'"});
  }
  {
    TinyConfig c;
    c.arch = "qwen3";
    c.extra_tensors = {{"blk.1.ffn_gate_inp.weight", {c.n_embd, 4}}};
    cases.push_back({"moe router", c, ErrorCode::kUnsupported, "'blk.1.ffn_gate_inp.weight'"});
  }
  for (const char* key : {"llama.rope.scaling.yarn_beta_fast", "llama.expert_count",
                          "llama.attention.layer_norm_epsilon", "llama.attention.sliding_window"}) {
    TinyConfig c;
    c.extra_f32_keys = {{key, 2.0f}};
    cases.push_back({key, c, ErrorCode::kUnsupported, key});
  }
  {
    TinyConfig c;
    c.arch = "gemma3";
    c.extra_f32_keys = {{"gemma3.attn_logit_softcapping", 50.0f}};
    cases.push_back(
        {"attention softcapping", c, ErrorCode::kUnsupported, "'gemma3.attn_logit_softcapping'"});
  }
  {
    TinyConfig c;
    c.extra_string_keys = {{"llama.rope.scaling.type", "longrope"}};
    cases.push_back({"longrope", c, ErrorCode::kUnsupported, "rope scaling 'longrope'"});
  }
  ExpectRefused(cases);
  TinyConfig fine;
  fine.extra_f32_keys = {{"llama.rope.scaling.factor", 1.0f}};  // inert without a scaling type
  fine.extra_string_keys = {{"llama.tensor_data_layout", "Meta AI original pth"},
                            {"general.license", "apache-2.0"}};
  auto m = LoadTiny(fine);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
}

// Llama 3.1+'s rope_freqs.weight is read into the spec and every layer's RoPE; factors that are
// not finite and positive are refused by name.
TEST(ModelLoad, LlamaReadsRopeFrequencyFactors) {
  TinyConfig c;
  c.extra_tensors = {{"rope_freqs.weight", {c.head_dim / 2}}};
  c.rope_freqs_ramp = 3.0f;
  auto m = LoadTiny(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::vector<float>& f = (*m)->spec().rope_freq_factors;
  ASSERT_EQ(f.size(), static_cast<size_t>(c.head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) EXPECT_FLOAT_EQ(f[i], 1.0f + 3.0f * i / f.size());
  for (const kv::RopeSpec& r : (*m)->rope_specs()) EXPECT_EQ(r.freq_factors, f);
  c.rope_freqs_ramp = -2.0f;  // 1 - 2i/n: 0 and below
  auto bad = LoadTiny(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rope_freqs.weight"), std::string::npos);
}

// Linear rope scaling: every layer's angles times 1 / factor, except Gemma-3's local layers
// (llama.cpp: rope_freq_scale_train_swa = 1); a factor of 0 means none, a negative one is refused.
TEST(ModelLoad, LinearRopeScaling) {
  TinyConfig llama;
  llama.extra_string_keys = {{"llama.rope.scaling.type", "linear"}};
  llama.extra_f32_keys = {{"llama.rope.scaling.factor", 4.0f}};
  auto m = LoadTiny(llama);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (const LayerSpec& l : (*m)->spec().layers) {
    EXPECT_EQ(l.rope_scaling.freq_scale, 0.25f);
    EXPECT_EQ(l.rope_scaling.ext_factor, 0.0f);
    EXPECT_EQ(l.rope_magnitude, 1.0f);
  }
  for (const kv::RopeSpec& r : (*m)->rope_specs()) EXPECT_EQ(r.scaling.freq_scale, 0.25f);

  TinyConfig gemma;
  gemma.arch = "gemma3";
  gemma.n_layers = 7;
  gemma.extra_string_keys = {{"gemma3.rope.scaling.type", "linear"}};
  gemma.extra_f32_keys = {{"gemma3.rope.scaling.factor", 8.0f}};
  auto g = LoadTiny(gemma);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::vector<LayerSpec>& layers = (*g)->spec().layers;
  for (int l = 0; l < 7; ++l) {
    EXPECT_EQ(layers[l].rope_scaling.freq_scale, l == 5 ? 0.125f : 1.0f) << l;
  }

  llama.extra_f32_keys = {{"llama.rope.scaling.factor", 0.0f}};
  m = LoadTiny(llama);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->spec().layers[0].rope_scaling.freq_scale, 1.0f);
  llama.extra_f32_keys = {{"llama.rope.scaling.factor", -2.0f}};
  EXPECT_EQ(LoadTiny(llama).status().code(), ErrorCode::kCorrupt);
  llama.extra_f32_keys = {};
  EXPECT_EQ(LoadTiny(llama).status().code(), ErrorCode::kNotFound);  // linear needs its factor
}

// YaRN (Qwen 2.5 long-context files, GPT-OSS): ext_factor 1, correction dims from
// ggml_rope_yarn_corr_dims with beta_fast 32 and beta_slow 1 over the original context, and Q/K
// magnitude (1 + 0.1 ln factor) * attn_factor. Expected values computed here by hand in double:
// rot_dim 16, base 10000, original context 4096: corr_dim(beta) = 16 ln(4096 / (2 pi beta)) /
// (2 ln 10000); beta 32: 2.618 -> floor 2; beta 1: 5.628 -> ceil 6.
TEST(ModelLoad, YarnRopeScaling) {
  TinyConfig c;
  c.arch = "qwen2";
  c.head_dim = 16;
  c.extra_string_keys = {{"qwen2.rope.scaling.type", "yarn"}};
  c.extra_f32_keys = {{"qwen2.rope.scaling.factor", 4.0f},
                      {"qwen2.rope.scaling.attn_factor", 0.5f}};
  c.extra_u32_keys = {{"qwen2.rope.scaling.original_context_length", 4096}};
  auto m = LoadTiny(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ((*m)->spec().rope_dim, 16);
  for (const LayerSpec& l : (*m)->spec().layers) {
    EXPECT_EQ(l.rope_scaling.freq_scale, 0.25f);
    EXPECT_EQ(l.rope_scaling.ext_factor, 1.0f);
    EXPECT_EQ(l.rope_scaling.corr_low, 2.0f);
    EXPECT_EQ(l.rope_scaling.corr_high, 6.0f);
    EXPECT_NEAR(l.rope_magnitude, 0.5 * (1.0 + 0.1 * std::log(4.0)), 1e-6);
  }
  for (const kv::RopeSpec& r : (*m)->rope_specs()) EXPECT_EQ(r.scaling.corr_high, 6.0f);
  c.extra_f32_keys = {};
  EXPECT_EQ(LoadTiny(c).status().code(), ErrorCode::kNotFound);  // YaRN needs its factor
}

// Qwen3-MoE: the expert counts and widths are read, each expert is its slice of the 3-D tensors
// (consecutive, equal strides), and counts or shapes that do not fit are refused by name.
TEST(ModelLoad, Qwen3MoeReadsExperts) {
  TinyConfig c;
  c.arch = "qwen3moe";
  auto m = LoadTiny(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelSpec& s = (*m)->spec();
  EXPECT_EQ(s.n_expert, 4);
  EXPECT_EQ(s.n_expert_used, 2);
  EXPECT_EQ(s.n_ff_exp, c.n_ff / 2);
  EXPECT_EQ(s.expert_gating, ExpertGating::kSoftmaxNormalized);
  EXPECT_EQ(s.ffn_params_per_token(), int64_t{32} * 4 + 2 * 3 * 32 * 24);
  const LayerWeights& l = (*m)->weights().layers[1];
  ASSERT_EQ(l.exp_up.size(), 4u);
  const size_t expert_bytes = size_t{24} * 32 * sizeof(float);
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(static_cast<const uint8_t*>(l.exp_up[e].data),
              static_cast<const uint8_t*>(l.exp_up[0].data) + e * expert_bytes);
    EXPECT_EQ(l.exp_down[e].n_in, 24);
    EXPECT_EQ(l.exp_down[e].n_out, 32);
  }
  std::vector<BadCase> cases;
  {
    TinyConfig b = c;
    b.n_expert_used = 5;
    cases.push_back({"more used than experts", b, ErrorCode::kCorrupt, "expert_used_count"});
  }
  {
    TinyConfig b = c;
    b.reshape_tensor = "blk.0.ffn_down_exps.weight";
    cases.push_back({"expert shape", b, ErrorCode::kCorrupt, "'blk.0.ffn_down_exps.weight'"});
  }
  {
    TinyConfig b = c;
    b.skip_tensor = "blk.1.ffn_gate_inp.weight";
    cases.push_back({"no router", b, ErrorCode::kNotFound, "blk.1.ffn_gate_inp.weight"});
  }
  ExpectRefused(cases);
}

// A single-file multimodal Gemma 3 (Ollama's) carries the vision tower: its tensors and keys are
// ignored on purpose and the load says so; the same tensors on another family are refused.
TEST(ModelLoad, Gemma3VisionTowerIsIgnoredAndSaidSo) {
  TinyConfig c;
  c.arch = "gemma3";
  c.extra_tensors = {{"v.blk.0.attn_q.weight", {16, 16}}, {"mm.input_projection.weight", {16, 32}}};
  c.extra_u32_keys = {{"gemma3.vision.block_count", 2}};
  c.extra_f32_keys = {{"gemma3.vision.attention.layer_norm_epsilon", 1e-6f}};
  auto m = LoadTiny(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NE((*m)->load_note().find("ignored 2 tensors"), std::string::npos) << (*m)->load_note();
  EXPECT_NE((*m)->load_note().find("text model"), std::string::npos);
  c.extra_tensors.clear();
  c.extra_f32_keys.clear();
  c.extra_u32_keys.clear();
  auto plain = LoadTiny(c);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->load_note(), "");
  TinyConfig mmproj;  // the vision tower in its own file (llama.cpp's mmproj-*.gguf)
  mmproj.arch = "clip";
  ExpectRefused({{"mmproj", mmproj, ErrorCode::kUnsupported, "vision projector (mmproj)"}});
  TinyConfig llama;
  llama.extra_tensors = {{"v.blk.0.attn_q.weight", {16, 16}}};
  ExpectRefused(
      {{"vision tensor on llama", llama, ErrorCode::kUnsupported, "'v.blk.0.attn_q.weight'"}});
}

TEST(ModelLoad, MissingFileIsAnIoError) {
  auto m = Model::Load("/nonexistent/model.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kIo);
}

}  // namespace
}  // namespace kvmem::model
