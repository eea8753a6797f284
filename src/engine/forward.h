// One forward pass of a batch of tokens over a sequence's KV memory, stepped layer by layer.
//
//   ForwardPass fp(model, pool);
//   fp.Begin(batch, &seq);            // the batch's rows appended to (or chosen in) seq; embed
//   while (!fp.done()) fp.StepLayer(); // between steps: change later layers' views, KeepTokens()
//   fp.Finish(&logits);               // final norm + LM head
//
// What each token attends to is the (layer, KV head) list of seq's view, filtered by position
// (a row is visible to a token if its view position is <= the token's position) and, when the
// batch says so, by an allowed set of rows (custom visibility). A LayerTap, when set, runs in
// every layer after the batch's K/V rows are stored and before attention: it sees the layer's
// post-RoPE Q rows and can ask for attention weights of any token and head over the rows that
// token reads — the hooks memory policies use to score blocks and tokens.
// After a persistent batch, sliding-window layers release the rows later tokens cannot reach
// (kv::KvSequence::ReleaseLayerThrough; off with seq.set_window_release(false)).
// Forward() runs a plain prompt through, splitting it into micro-batches to bound scratch memory.
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

  // Optional (n): rows the sequence already holds (and its view already lists) to overwrite,
  // e.g. to recompute cached tokens; by default new rows are appended to the sequence and view.
  std::vector<kv::RowRef> rows;
  // Optional (n): for each token, the rows written before this batch that it may read, sorted
  // by (block, first_row); the batch's own rows stay readable under the position rule.
  // Empty: everything in the view.
  std::vector<std::vector<model::RowRange>> visible;
  // false: the appended rows are removed from the sequence at Finish(), leaving nothing behind
  // (e.g. a scoring prompt). Requires appended rows.
  bool persist = true;
};

class ForwardPass;

// What a LayerTap sees. Valid only during the tap call.
class TapContext {
 public:
  int layer() const { return layer_; }
  int n_tokens() const;
  std::span<const int64_t> positions() const;
  // Post-RoPE queries: (n_tokens, n_heads, head_dim_k).
  std::span<const float> q() const;
  // Softmax weights of token t, query head h over the rows it reads in this layer, in the order
  // attention reads them; rows[i] names the row of weights[i].
  void AttentionWeights(int t, int h, std::vector<float>* weights,
                        std::vector<kv::RowRef>* rows) const;

 private:
  friend class ForwardPass;
  TapContext(const ForwardPass* fp, int layer) : fp_(fp), layer_(layer) {}
  const ForwardPass* fp_;
  int layer_;
};

using LayerTap = std::function<void(const TapContext&)>;

class ForwardPass {
 public:
  ForwardPass(const model::Model& model, ThreadPool* pool);

  Status Begin(const Batch& batch, kv::KvSequence* seq);
  bool done() const { return next_layer_ >= model_.spec().n_layers; }
  int next_layer() const { return next_layer_; }
  void StepLayer();
  // From the next layer on, compute only the batch tokens at these indices (ascending, of the
  // tokens still computed). The others keep the K/V their rows hold in later layers (cached
  // rows) and get no logits.
  Status KeepTokens(std::span<const int> indices);
  // logits: (n_out, n_vocab), n_out = tokens still computed if batch.all_logits, else 1 (last).
  void Finish(std::vector<float>* logits);

  void set_tap(LayerTap tap) { tap_ = std::move(tap); }
  // The residual stream (n_tokens, n_embd) after the layers run so far.
  std::span<const float> hidden() const { return x_; }
  // The rows of the tokens still computed, in batch order.
  std::span<const kv::RowRef> rows() const { return rows_; }

 private:
  friend class TapContext;
  model::Visibility visibility() const { return {positions_, allowed_}; }
  // After a persistent pass: sliding-window layers give back rows no later token can read.
  void ReleaseOutOfWindow();

  const model::Model& model_;
  ThreadPool* pool_;
  kv::KvSequence* seq_ = nullptr;
  std::vector<int32_t> tokens_;   // (n) tokens still computed
  std::vector<int64_t> positions_;
  std::vector<kv::RowRef> rows_;
  std::vector<std::vector<model::RowRange>> allowed_;  // empty or (n)
  bool all_logits_ = false;
  bool persist_ = true;
  int64_t rows_before_ = 0;
  std::vector<float> x_;  // (n, n_embd)
  model::BlockScratch scratch_;
  LayerTap tap_;
  int next_layer_ = 0;
};

// The pieces of a pass that ForwardPass and ForwardMany (forward_many.h) share.
// Checks `batch` against seq (token ids, rows, released sliding-window rows) and places its rows:
// the given ones, or rows appended to seq at the batch's positions (removed again on error).
Status PlaceBatch(const model::ModelSpec& spec, const Batch& batch, kv::KvSequence* seq,
                  std::vector<kv::RowRef>* placed);
// x (tokens.size(), n_embd) = the tokens' embeddings, scaled as the family does.
void Embed(const model::Model& model, std::span<const int32_t> tokens, float* x);
// logits (n, n_vocab) = LM head of the final norm of x (n, n_embd); xn is scratch.
void OutputLogits(const model::Model& model, const float* x, int n, std::vector<float>* xn,
                  std::vector<float>* logits, ThreadPool* pool);

// Gives back the rows of seq's sliding-window layers that no token at position >= next can read
// (kv::KvSequence::ReleaseLayerThrough): what a persistent pass does after itself when the
// sequence's window release is on, and what a caller that turned it off (to keep a turn
// undoable) does once the turn is kept.
void ReleaseOutOfWindow(const model::ModelSpec& spec, kv::KvSequence* seq, int64_t next);

// Runs `tokens` at positions first_pos.. through the model over seq in micro-batches of at most
// max_batch tokens. logits: (n, n_vocab) if all_logits else (1, n_vocab) for the last token.
Status Forward(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
               std::span<const int32_t> tokens, int64_t first_pos, bool all_logits,
               std::vector<float>* logits, int max_batch = 256);

}  // namespace kvmem::engine
