// The pre-norm transformer block shared by every supported family, as separate stages so the
// engine can stop between them (layer stepping, taps on Q rows):
//
//   x (n_tokens, n_embd) residual stream
//   ProjectQkv:   xn = RMSNorm(x) * attn_norm; q, k, v = xn W^T (+ bias); [QK-norm];
//                 RoPE(q, k) with the layer's base
//   StoreKv:      k, v rows -> the pool rows of this batch (f16), recording the rotation position
//   Attend:       attn[t, h] = softmax(q . K^T * scale) V over the rows of the (layer, KV head)
//                 view list that token t may see: live rows whose view position is <= the
//                 token's position (causal by position, which also covers the batch's own rows)
//                 and, in a sliding-window layer, > position - window; restricted, when given,
//                 to the token's allowed row ranges; with attention sinks (GPT-OSS), each
//                 head's sink logit joins the softmax's denominator
//   OutputAndFfn: o = attn Wo^T; [o = RMSNorm(o) * attn_post_norm]; x += o;
//                 f = W_down (act(RMSNorm(x) W_gate^T) * (... W_up^T)), or the mixture of
//                 experts of moe_ffn.h;
//                 [f = RMSNorm(f) * ffn_post_norm]; x += f      (act: SiLU or GELU-tanh)
//
// Every intermediate is a named buffer of BlockScratch so it can be dumped and compared.
// Thread-safety: stages use the given ThreadPool; one scratch per concurrent forward pass.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_pool.h"
#include "kv/kv_view.h"
#include "model/model_spec.h"
#include "model/moe_ffn.h"
#include "model/weights.h"

namespace kvmem::model {

struct BlockScratch {
  int n_tokens = 0;
  std::vector<float> xn;        // (n_tokens, n_embd) normed input of the current sub-layer
  std::vector<float> q;         // (n_tokens, n_heads, head_dim_k) post-RoPE
  std::vector<float> k;         // (n_tokens, n_kv_heads, head_dim_k) post-RoPE
  std::vector<float> v;         // (n_tokens, n_kv_heads, head_dim_v)
  std::vector<float> attn;      // (n_tokens, n_heads, head_dim_v)
  std::vector<float> proj;      // (n_tokens, n_embd)
  std::vector<float> gate;      // (n_tokens, n_ff)
  std::vector<float> up;        // (n_tokens, n_ff)
  std::vector<float> partials;  // attention states of the decode chunks (AttendGrouped)
  MoeScratch moe;               // spec.n_expert > 0: the mixture-of-experts FFN's buffers

  void Resize(const ModelSpec& spec, int n_tokens);
};

void ProjectQkv(const ModelSpec& spec, int layer, const LayerWeights& w, const float* x,
                std::span<const int64_t> positions, BlockScratch& s, ThreadPool* pool);

// Stores the K/V of scratch tokens [first_token, first_token + rows.size()) in `rows`
// (a batch of several sequences stores each sequence's tokens in its own pool).
void StoreKv(const ModelSpec& spec, int layer, const BlockScratch& s,
             std::span<const kv::RowRef> rows, std::span<const int64_t> positions, kv::KvPool& kv,
             int first_token = 0);

// Rows [first_row, first_row + n_rows) of one block.
struct RowRange {
  int32_t block;
  int32_t first_row;
  int32_t n_rows;
};

// Which rows each batch token may read. positions: (n_tokens). allowed: empty (every row), or
// (n_tokens) lists of row ranges, each sorted by (block, first_row) and non-overlapping.
struct Visibility {
  std::span<const int64_t> positions;
  std::span<const std::vector<RowRange>> allowed;
};

// The rows token t reads in (layer, head), in view order, as kernel spans; `ranges` (if not
// null) receives the same rows as RowRanges so a caller can name them. window: the layer's
// sliding window (LayerSpec::sliding_window; 0 = none).
void CollectVisible(const kv::KvView& view, const kv::KvPool& kv, int layer, int head, int window,
                    const Visibility& vis, int t, std::vector<kernels::KvSpan>* spans,
                    std::vector<RowRange>* ranges);

// Attention of scratch tokens [first_token, first_token + vis.positions.size()) over `view`.
// sinks: the layer's attention sinks, one per query head (LayerWeights::attn_sinks), or empty.
void Attend(const ModelSpec& spec, int layer, const kv::KvView& view, const kv::KvPool& kv,
            const Visibility& vis, std::span<const float> sinks, BlockScratch& s,
            ThreadPool* pool, int first_token = 0);

// One piece of a batch of several sequences: its tokens [first_token, first_token +
// vis.positions.size()) of the scratch attend over its own view and pool.
struct AttendPiece {
  const kv::KvView* view = nullptr;
  const kv::KvPool* kv = nullptr;
  Visibility vis;
  int first_token = 0;
};

// Attend for every piece, with the (token, KV head) pairs of all pieces in one parallel loop
// (a decode step of many sequences pays one hand-out per layer, not one per sequence). Each
// token's result is what Attend gives it alone.
void AttendMany(const ModelSpec& spec, int layer, std::span<const AttendPiece> pieces,
                std::span<const float> sinks, BlockScratch& s, ThreadPool* pool);

void OutputAndFfn(const ModelSpec& spec, const LayerWeights& w, float* x, BlockScratch& s,
                  ThreadPool* pool);

}  // namespace kvmem::model
