// Scoring a given token sequence (OpenAI completions' `echo` with `logprobs`, as evaluation
// tools use it): the logprob of each token given the ones before it, under the model's raw
// distribution (engine/logprobs.h).
// Not thread-safe: one call per sequence; the ThreadPool parallelizes inside each step.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/logprobs.h"
#include "kv/kv_sequence.h"
#include "model/model.h"

namespace kvmem::engine {

// Appends `tokens` to `seq` (at positions seq->n_rows()...) and sets (*out)[i] to the account of
// tokens[i + 1] for i < tokens.size() - 1, with `top_n` alternatives each. The logits are taken
// in micro-batches of max_batch tokens, so scratch stays (max_batch, n_vocab) whatever the
// length. `compute_mu` (may be null) is held around each forward pass.
Status ScoreTokens(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
                   std::span<const int32_t> tokens, int top_n, int max_batch,
                   std::mutex* compute_mu, std::vector<TokenLogprob>* out);

}  // namespace kvmem::engine
