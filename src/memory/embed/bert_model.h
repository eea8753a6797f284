// A BERT encoder (Hugging Face `BertModel` without the pooler): word + absolute position +
// token-type embeddings and LayerNorm, then n_layers post-LayerNorm blocks
//
//   x = LN(x + Wo . attention(Wq x, Wk x, Wv x))      bidirectional, per sequence
//   x = LN(x + W2 . gelu_erf(W1 x))
//
// with biases on every projection. Weights are read from a Hugging Face safetensors checkpoint
// (names `embeddings.*` and `encoder.layer.N.*`, optionally under `bert.`) in F32, F16 or BF16
// and kept as f32 copies, so the file need not stay mapped. Every tensor's presence, dtype and
// shape is checked against the config before use.
//
// Thread-safe: immutable after Load; Forward may run concurrently on different pools.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "memory/store/safetensors.h"

namespace kvmem::memory::embed {

// config.json of a BERT checkpoint.
struct BertConfig {
  int vocab_size = 0;
  int hidden = 0;         // hidden_size
  int n_layers = 0;       // num_hidden_layers
  int n_heads = 0;        // num_attention_heads
  int intermediate = 0;   // intermediate_size
  int max_positions = 0;  // max_position_embeddings
  int type_vocab_size = 0;
  float layer_norm_eps = 1e-12f;

  int head_dim() const { return hidden / n_heads; }
  // Corrupt/Unsupported naming the field: non-BERT model types, activations other than exact
  // GELU, relative position embeddings, sizes out of range or inconsistent.
  static Result<BertConfig> FromJson(std::string_view json);
};

class BertModel {
 public:
  static Result<BertModel> FromSafetensors(const BertConfig& config,
                                           const store::SafetensorsView& file);

  const BertConfig& config() const { return config_; }

  // Runs the encoder on sequences laid end to end: ids (n_tokens) holds them one after another,
  // seq_lens their lengths (each in 1..max_positions, summing to n_tokens); token type 0. Every
  // token attends to every token of its own sequence. out: (n_tokens, hidden), the last layer's
  // hidden states. ids must be < vocab_size (the caller's tokenizer guarantees it).
  void Forward(std::span<const int32_t> ids, std::span<const int> seq_lens, float* out,
               ThreadPool* pool) const;

 private:
  struct Linear {
    std::vector<float> w;  // (n_out, n_in), as torch.nn.Linear stores it
    std::vector<float> b;  // (n_out)
    int n_in = 0;
    int n_out = 0;
  };
  struct Norm {
    std::vector<float> g;  // (hidden)
    std::vector<float> b;  // (hidden)
  };
  struct Layer {
    Linear qkv;  // (3 * hidden, hidden): query, key, value rows stacked
    Linear attn_out;
    Norm attn_norm;
    Linear ffn_up;    // (intermediate, hidden)
    Linear ffn_down;  // (hidden, intermediate)
    Norm ffn_norm;
  };

  BertModel() = default;
  // y(n, n_out) = x(n, n_in) . W^T + b
  static void Apply(const Linear& l, const float* x, int64_t n, float* y, ThreadPool* pool);
  // x = LN(x + r) row by row; x, r: (n, hidden).
  void AddNorm(const Norm& norm, const float* r, float* x, int64_t n, ThreadPool* pool) const;
  // ctx(n_tokens, hidden) from qkv(n_tokens, 3 * hidden).
  void Attention(const float* qkv, std::span<const int> seq_lens, float* ctx,
                 ThreadPool* pool) const;

  BertConfig config_;
  std::vector<float> word_emb_;   // (vocab_size, hidden)
  std::vector<float> pos_emb_;    // (max_positions, hidden)
  std::vector<float> type0_emb_;  // (hidden): token type 0
  Norm emb_norm_;
  std::vector<Layer> layers_;
};

}  // namespace kvmem::memory::embed
