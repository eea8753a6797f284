// Test fixture: a tiny random-weight llama / qwen2 / qwen3 / gemma3 GGUF written to a temp file,
// with F32 weights drawn from a seeded normal distribution (the GGUF test writer lays out the file;
// the weights are then written over its placeholder tensor bytes).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "../gguf/gguf_test_writer.h"

namespace kvmem::model::testing {

struct TinyConfig {
  std::string arch = "llama";
  int n_layers = 2;
  int n_embd = 32;
  int n_heads = 4;
  int n_kv_heads = 2;
  int head_dim = 8;
  int n_ff = 48;
  int n_vocab = 64;
  float rope_base = 10000.0f;
  bool tied = true;
  // gemma3 only: attention.sliding_window, and the optional keys when > 0.
  int sliding_window = 4;
  float rope_base_swa = 0.0f;
  float final_logit_softcap = 0.0f;
  // qwen3moe only: experts n_ff / 2 wide.
  int n_expert = 4;
  int n_expert_used = 2;
  // Hooks for broken files.
  std::string skip_tensor;
  std::string skip_key;        // metadata key left out, e.g. "gemma3.attention.sliding_window"
  std::string reshape_tensor;  // given the wrong first dimension
  // Extras a real file of another model would carry (math_keys.h refuses them).
  std::vector<std::pair<std::string, std::vector<int64_t>>> extra_tensors;
  std::vector<std::pair<std::string, float>> extra_f32_keys;
  std::vector<std::pair<std::string, uint32_t>> extra_u32_keys;
  std::vector<std::pair<std::string, std::string>> extra_string_keys;
  // rope_freqs.weight, when among extra_tensors, holds 1 + ramp * i / n (Llama 3.1's rise).
  float rope_freqs_ramp = 0.0f;
};

inline std::vector<uint8_t> BuildTinyGguf(const TinyConfig& c, uint32_t seed = 1) {
  using gguf::ValueType;
  gguf::testing::GgufBuilder b;
  const std::string a = c.arch;
  const bool gemma = a == "gemma3";
  b.String("general.architecture", a);
  auto put_u32 = [&](const std::string& key, int v) {
    if (key != c.skip_key) b.Scalar(key, ValueType::kUint32, uint32_t(v));
  };
  auto put_f32 = [&](const std::string& key, float v) {
    if (key != c.skip_key) b.Scalar(key, ValueType::kFloat32, v);
  };
  put_u32(a + ".block_count", c.n_layers);
  put_u32(a + ".embedding_length", c.n_embd);
  put_u32(a + ".feed_forward_length", c.n_ff);
  put_u32(a + ".attention.head_count", c.n_heads);
  put_u32(a + ".attention.head_count_kv", c.n_kv_heads);
  put_u32(a + ".attention.key_length", c.head_dim);
  put_u32(a + ".attention.value_length", c.head_dim);
  put_u32(a + ".context_length", 512);
  put_f32(a + ".rope.freq_base", c.rope_base);
  put_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (a == "qwen3moe") {
    put_u32(a + ".expert_count", c.n_expert);
    put_u32(a + ".expert_used_count", c.n_expert_used);
    put_u32(a + ".expert_feed_forward_length", c.n_ff / 2);
  }
  if (gemma) {
    put_u32(a + ".attention.sliding_window", c.sliding_window);
    if (c.rope_base_swa > 0.0f) put_f32(a + ".rope.freq_base_swa", c.rope_base_swa);
    if (c.final_logit_softcap > 0.0f) {
      put_f32(a + ".final_logit_softcapping", c.final_logit_softcap);
    }
  }
  for (const auto& [key, v] : c.extra_f32_keys) b.Scalar(key, ValueType::kFloat32, v);
  for (const auto& [key, v] : c.extra_u32_keys) b.Scalar(key, ValueType::kUint32, v);
  for (const auto& [key, v] : c.extra_string_keys) b.String(key, v);
  const uint32_t f32 = static_cast<uint32_t>(DType::kF32);
  const int64_t qd = int64_t{c.n_heads} * c.head_dim, kd = int64_t{c.n_kv_heads} * c.head_dim;
  auto add = [&](const std::string& name, std::vector<int64_t> dims) {
    if (name == c.skip_tensor) return;
    if (name == c.reshape_tensor) dims[0] += 1;
    b.Tensor(name, dims, f32);
  };
  add("token_embd.weight", {c.n_embd, c.n_vocab});
  add("output_norm.weight", {c.n_embd});
  if (!c.tied) add("output.weight", {c.n_embd, c.n_vocab});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {c.n_embd});
    add(p + "attn_q.weight", {c.n_embd, qd});
    add(p + "attn_k.weight", {c.n_embd, kd});
    add(p + "attn_v.weight", {c.n_embd, kd});
    add(p + "attn_output.weight", {qd, c.n_embd});
    if (a == "qwen2") {
      add(p + "attn_q.bias", {qd});
      add(p + "attn_k.bias", {kd});
      add(p + "attn_v.bias", {kd});
    }
    if (a == "qwen3" || a == "qwen3moe" || gemma) {
      add(p + "attn_q_norm.weight", {c.head_dim});
      add(p + "attn_k_norm.weight", {c.head_dim});
    }
    if (gemma) add(p + "post_attention_norm.weight", {c.n_embd});
    add(p + "ffn_norm.weight", {c.n_embd});
    if (a == "qwen3moe") {
      add(p + "ffn_gate_inp.weight", {c.n_embd, c.n_expert});
      add(p + "ffn_gate_exps.weight", {c.n_embd, c.n_ff / 2, c.n_expert});
      add(p + "ffn_up_exps.weight", {c.n_embd, c.n_ff / 2, c.n_expert});
      add(p + "ffn_down_exps.weight", {c.n_ff / 2, c.n_embd, c.n_expert});
    } else {
      add(p + "ffn_gate.weight", {c.n_embd, c.n_ff});
      add(p + "ffn_up.weight", {c.n_embd, c.n_ff});
      add(p + "ffn_down.weight", {c.n_ff, c.n_embd});
    }
    if (gemma) add(p + "post_ffw_norm.weight", {c.n_embd});
  }
  for (const auto& [name, dims] : c.extra_tensors) add(name, dims);
  std::vector<uint8_t> bytes = b.Build();
  // Replace the placeholder bytes with sane weights: norms near 1, the rest N(0, 0.3).
  auto parsed = gguf::GgufFile::Parse(bytes);
  if (!parsed.ok()) return bytes;  // broken on purpose; the loader reports it
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (const gguf::TensorInfo& t : parsed->tensors()) {
    const bool is_norm = t.name.find("norm") != std::string::npos;
    const bool is_factor = t.name == "rope_freqs.weight";
    uint8_t* dst = bytes.data() + (t.data - bytes.data());
    for (int64_t i = 0; i < t.n_elements; ++i) {
      float v = is_factor ? 1.0f + c.rope_freqs_ramp * static_cast<float>(i) /
                                       static_cast<float>(t.n_elements)
                : is_norm ? 1.0f + 0.2f * normal(rng)
                          : normal(rng);
      std::memcpy(dst + i * 4, &v, 4);
    }
  }
  return bytes;
}

// Writes bytes to a unique temp file, removed on destruction.
class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t>& bytes) {
    char tmpl[] = "/tmp/kvmem_tiny_XXXXXX";
    int fd = mkstemp(tmpl);
    path_ = tmpl;
    if (fd >= 0) {
      ssize_t n = write(fd, bytes.data(), bytes.size());
      (void)n;
      close(fd);
    }
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kvmem::model::testing
