// One forward pass of a batch of new tokens over a sequence's KV memory, stepped layer by layer.
//
//   ForwardPass fp(model, pool);
//   fp.Begin(batch, &seq);            // rows for the batch appended to seq's view; tokens embedded
//   while (!fp.done()) fp.StepLayer(); // between steps a caller may change later layers' views
//   fp.Finish(&logits);               // final norm + LM head
//
// A query tap, when set, sees each layer's post-RoPE Q rows just before attention (the hook
// memory policies use to score blocks or tokens). Forward() runs the whole thing, splitting long
// prompts into micro-batches to bound scratch memory.
// Not thread-safe: one ForwardPass per thread; the ThreadPool parallelizes inside each stage.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_sequence.h"
#include "model/model.h"
#include "model/transformer_block.h"

namespace kvmem::engine {

struct Batch {
  std::vector<int32_t> tokens;     // (n)
  std::vector<int64_t> positions;  // (n) logical positions the tokens are computed at
  bool all_logits = false;         // logits for every token, else only for the last
};

// (layer, q rows (n_tokens, n_heads, head_dim_k) post-RoPE, n_tokens)
using QueryTap = std::function<void(int layer, std::span<const float> q, int n_tokens)>;

class ForwardPass {
 public:
  ForwardPass(const model::Model& model, ThreadPool* pool);

  Status Begin(const Batch& batch, kv::KvSequence* seq);
  bool done() const { return next_layer_ >= model_.spec().n_layers; }
  int next_layer() const { return next_layer_; }
  void StepLayer();
  // logits: (n_out, n_vocab), n_out = n_tokens if batch.all_logits else 1.
  void Finish(std::vector<float>* logits);

  void set_query_tap(QueryTap tap) { tap_ = std::move(tap); }
  // The residual stream (n_tokens, n_embd) after the layers run so far.
  std::span<const float> hidden() const { return x_; }

 private:
  const model::Model& model_;
  ThreadPool* pool_;
  kv::KvSequence* seq_ = nullptr;
  Batch batch_;
  std::vector<kv::RowRef> rows_;
  std::vector<float> x_;  // (n_tokens, n_embd)
  model::BlockScratch scratch_;
  QueryTap tap_;
  int next_layer_ = 0;
};

// Runs `tokens` at positions first_pos.. through the model over seq in micro-batches of at most
// max_batch tokens. logits: (n, n_vocab) if all_logits else (1, n_vocab) for the last token.
Status Forward(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
               std::span<const int32_t> tokens, int64_t first_pos, bool all_logits,
               std::vector<float>* logits, int max_batch = 256);

}  // namespace kvmem::engine
