#include "engine/memory_budget.h"

#include <algorithm>

namespace kvmem::engine {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Layer-blocks held while a batch covering positions [s, e) runs.
int64_t LayerBlocksDuring(const model::ModelSpec& spec, int64_t rows, int64_t s, int64_t e,
                          bool release) {
  const int64_t in_use = CeilDiv(e, rows);
  int64_t total = 0;
  for (const model::LayerSpec& l : spec.layers) {
    int64_t released = 0;
    if (release && l.sliding_window > 0 && s > 0) {
      // Released after the previous batch (next position s): whole blocks (of the s rows then
      // written) whose last position s' = (i+1)*rows - 1 satisfies s' <= s - W.
      const int64_t cut = s - l.sliding_window;
      released = std::min(s / rows, cut >= 0 ? (cut + 1) / rows : 0);
    }
    total += in_use - released;
  }
  return total;
}

}  // namespace

size_t PeakKvBytes(const model::ModelSpec& spec, const kv::KvPool& pool, int64_t n_prompt,
                   int64_t n_decode, int max_batch, bool release) {
  const int64_t rows = pool.geometry().block_rows;
  int64_t peak = 0;
  for (int64_t s = 0; s < n_prompt; s += max_batch) {
    peak = std::max(peak, LayerBlocksDuring(spec, rows, s, std::min(n_prompt, s + max_batch),
                                            release));
  }
  for (int64_t p = n_prompt; p < n_prompt + n_decode; ++p) {
    peak = std::max(peak, LayerBlocksDuring(spec, rows, p, p + 1, release));
  }
  return static_cast<size_t>(peak) * pool.layer_bytes();
}

MemoryBudget PlainRunBudget(const model::Model& model, const kv::KvPool& pool, int64_t n_prompt,
                            int64_t n_decode, int max_batch) {
  const model::ModelSpec& spec = model.spec();
  MemoryBudget b;
  for (const gguf::TensorInfo& t : model.file().tensors()) b.weights += t.n_bytes;
  // Packed matrices are read from their copies, not from the file.
  b.weights = b.weights - model.packed_source_bytes() + model.packed_bytes();
  b.kv = PeakKvBytes(spec, pool, n_prompt, n_decode, max_batch, true);
  b.kv_without_release = PeakKvBytes(spec, pool, n_prompt, n_decode, max_batch, false);
  const size_t t =
      static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(n_prompt, 1), max_batch));
  // Per token (floats): the residual stream and BlockScratch's buffers; plus one Q8-class
  // activation row per token for the integer dot products (~1.1 bytes per value, the widest
  // input n_ff), and the logits of the last token.
  const size_t per_token = 2 * spec.n_embd + spec.q_dim() + spec.k_dim() + spec.v_dim() +
                           static_cast<size_t>(spec.n_heads) * spec.head_dim_v + spec.n_embd +
                           2 * static_cast<size_t>(spec.n_ff);
  b.scratch = t * per_token * sizeof(float) + t * spec.n_ff * 9 / 8 +
              static_cast<size_t>(spec.n_vocab) * sizeof(float);
  return b;
}

}  // namespace kvmem::engine
