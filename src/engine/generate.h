// The plain generation loop over one sequence: prefill the prompt, then sample and feed back one
// token at a time until a token budget, an end-of-generation token or the caller says stop.
// Timing and the hash of the final logits are reported for `kvmem run`'s stderr line.
// Not thread-safe; the ThreadPool parallelizes inside each step.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kv/kv_sequence.h"
#include "model/model.h"

namespace kvmem::engine {

struct GenerateParams {
  int max_new_tokens = 128;
  SamplerConfig sampler;
  int max_batch = 256;  // prompt micro-batch size
  // Tokens are computed at position seq->n_rows() + position_offset (a policy whose sequence
  // holds rows read at other positions than their storage order, e.g. MemArt's coupled ablation).
  int64_t position_offset = 0;
};

struct GenerateStats {
  int n_prompt = 0;
  int n_generated = 0;
  double prompt_seconds = 0;
  double decode_seconds = 0;
  uint64_t logits_hash = 0;  // FNV-1a of the last logits vector computed
  std::string stop_reason;   // "length", "eog", "stop" (caller), "context"
};

// Called with each sampled token; return false to stop (the token is kept in the sequence).
using TokenCallback = std::function<bool(int32_t token)>;
// True for tokens that end generation (EOS, EOT).
using EogPredicate = std::function<bool(int32_t token)>;

// Appends prompt and generated tokens to `seq`, starting at position seq->n_rows() (plus
// params.position_offset).
// `history` receives prompt + generated ids (used for the repetition penalty).
Status Generate(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
                std::span<const int32_t> prompt, const GenerateParams& params,
                const EogPredicate& is_eog, const TokenCallback& on_token,
                std::vector<int32_t>* history, GenerateStats* stats);

}  // namespace kvmem::engine
