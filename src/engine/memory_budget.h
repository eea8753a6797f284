// The memory a plain run (prefill in micro-batches, then decode) needs, computed from the model's
// geometry alone — the figure `kvmem run` prints next to the measured peak RSS, so a leak or a
// buffer sized for the wrong context shows up as a gap between the two.
//
// KV follows the release rule of sliding-window layers (kv::KvSequence::ReleaseLayerThrough, run
// after each persistent batch): a global layer holds every block of the sequence; a local layer
// of window W holds, while a batch starting at position s runs, the blocks not yet released
// after the previous batch (whole blocks whose last position is <= s - W), plus the batch's own.
// Thread-safe (pure functions).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv/kv_pool.h"
#include "model/model.h"

namespace kvmem::engine {

struct MemoryBudget {
  size_t weights = 0;             // tensor data: the GGUF file's, packed copies for packed ones
  size_t kv = 0;                  // peak KV storage with window release
  size_t kv_without_release = 0;  // the same run keeping every row of every layer
  size_t scratch = 0;             // activations of the largest micro-batch + logits
  size_t total() const { return weights + kv + scratch; }
};

// A prompt of n_prompt tokens at positions 0.. in micro-batches of max_batch, then n_decode
// one-token steps, over a pool with `pool`'s geometry and formats.
MemoryBudget PlainRunBudget(const model::Model& model, const kv::KvPool& pool, int64_t n_prompt,
                            int64_t n_decode, int max_batch);

// Peak KV bytes of that run (exposed for tests against KvPool::peak_bytes_in_use()).
size_t PeakKvBytes(const model::ModelSpec& spec, const kv::KvPool& pool, int64_t n_prompt,
                   int64_t n_decode, int max_batch, bool release);

}  // namespace kvmem::engine
