#include "engine/generate.h"

#include "core/clock.h"

#include <chrono>

#include "core/hash.h"
#include "engine/forward.h"

namespace kvmem::engine {
namespace {
}  // namespace

Status Generate(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
                std::span<const int32_t> prompt, const GenerateParams& params,
                const EogPredicate& is_eog, const TokenCallback& on_token,
                std::vector<int32_t>* history, GenerateStats* stats) {
  *stats = GenerateStats();
  if (prompt.empty()) return InvalidArgument("empty prompt");
  const int64_t n_ctx = seq->pool()->max_blocks() * int64_t{seq->pool()->geometry().block_rows};
  if (seq->n_rows() + static_cast<int64_t>(prompt.size()) > n_ctx) {
    return OutOfRange("prompt of " + std::to_string(prompt.size()) +
                      " tokens does not fit the context of " + std::to_string(n_ctx));
  }
  history->insert(history->end(), prompt.begin(), prompt.end());
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  KVMEM_RETURN_IF_ERROR(Forward(model, pool, seq, prompt, seq->n_rows() + params.position_offset,
                                /*all_logits=*/false, &logits, params.max_batch));
  stats->n_prompt = static_cast<int>(prompt.size());
  stats->prompt_seconds = SecondsSince(t0);

  Sampler sampler(params.sampler);
  stats->stop_reason = "length";
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < params.max_new_tokens; ++i) {
    const int32_t tok = sampler.Sample(logits, *history);
    history->push_back(tok);
    ++stats->n_generated;
    if (is_eog && is_eog(tok)) {
      stats->stop_reason = "eog";
      break;
    }
    if (!on_token(tok)) {
      stats->stop_reason = "stop";
      break;
    }
    if (i + 1 == params.max_new_tokens) break;
    if (seq->n_rows() + 1 > n_ctx) {
      stats->stop_reason = "context";
      break;
    }
    const int32_t one[1] = {tok};
    KVMEM_RETURN_IF_ERROR(
        Forward(model, pool, seq, one, seq->n_rows() + params.position_offset, false, &logits));
  }
  stats->decode_seconds = SecondsSince(t0);
  stats->logits_hash = Fnv1a64(logits.data(), logits.size() * sizeof(float));
  return Status::Ok();
}

}  // namespace kvmem::engine
