// The pre-norm transformer block shared by every supported family, as separate stages so the
// engine can stop between them (layer stepping, taps on Q rows):
//
//   x (n_tokens, n_embd) residual stream
//   ProjectQkv:   xn = RMSNorm(x) * attn_norm; q, k, v = xn W^T (+ bias); [QK-norm]; RoPE(q, k)
//   StoreKv:      k, v rows -> the pool rows of this batch (f16), recording the rotation position
//   Attend:       attn[t, h] = softmax(q . K^T * scale) V over the rows of the layer's view that
//                 token t may see (all history rows plus batch rows up to t)
//   OutputAndFfn: x += attn Wo^T; x += W_down (act(RMSNorm(x) W_gate^T) * (... W_up^T))
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
#include "model/weights.h"

namespace kvmem::model {

struct BlockScratch {
  int n_tokens = 0;
  std::vector<float> xn;    // (n_tokens, n_embd) normed input of the current sub-layer
  std::vector<float> q;     // (n_tokens, n_heads, head_dim_k) post-RoPE
  std::vector<float> k;     // (n_tokens, n_kv_heads, head_dim_k) post-RoPE
  std::vector<float> v;     // (n_tokens, n_kv_heads, head_dim_v)
  std::vector<float> attn;  // (n_tokens, n_heads, head_dim_v)
  std::vector<float> proj;  // (n_tokens, n_embd)
  std::vector<float> gate;  // (n_tokens, n_ff)
  std::vector<float> up;    // (n_tokens, n_ff)

  void Resize(const ModelSpec& spec, int n_tokens);
};

void ProjectQkv(const ModelSpec& spec, const LayerWeights& w, const float* x,
                std::span<const int64_t> positions, BlockScratch& s, ThreadPool* pool);

void StoreKv(const ModelSpec& spec, int layer, const BlockScratch& s,
             std::span<const kv::RowRef> rows, std::span<const int64_t> positions,
             kv::KvPool& kv);

// The batch's own rows must be the last s.n_tokens rows of view.layer(layer), in batch order.
void Attend(const ModelSpec& spec, int layer, const kv::KvView& view, const kv::KvPool& kv,
            BlockScratch& s, ThreadPool* pool);

void OutputAndFfn(const ModelSpec& spec, const LayerWeights& w, float* x, BlockScratch& s,
                  ThreadPool* pool);

}  // namespace kvmem::model
