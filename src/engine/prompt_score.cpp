#include "engine/prompt_score.h"

#include <algorithm>
#include <optional>

#include "engine/forward.h"

namespace kvmem::engine {

Status ScoreTokens(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
                   std::span<const int32_t> tokens, int top_n, int max_batch,
                   std::mutex* compute_mu, std::vector<TokenLogprob>* out) {
  out->clear();
  if (tokens.size() < 2) return Status::Ok();
  out->reserve(tokens.size() - 1);
  const size_t n_vocab = static_cast<size_t>(model.spec().n_vocab);
  const size_t step = static_cast<size_t>(std::max(max_batch, 1));
  std::vector<float> logits;  // (part, n_vocab)
  // The last token's logits predict nothing that is scored.
  for (size_t begin = 0; begin + 1 < tokens.size(); begin += step) {
    const size_t end = std::min(begin + step, tokens.size() - 1);
    const std::span<const int32_t> part = tokens.subspan(begin, end - begin);
    {
      std::optional<std::lock_guard<std::mutex>> lock;
      if (compute_mu != nullptr) lock.emplace(*compute_mu);
      KVMEM_RETURN_IF_ERROR(Forward(model, pool, seq, part, seq->n_rows(), /*all_logits=*/true,
                                    &logits, static_cast<int>(step)));
    }
    for (size_t i = 0; i < part.size(); ++i) {
      const std::span<const float> row(logits.data() + i * n_vocab, n_vocab);
      out->push_back(LogprobOf(row, tokens[begin + i + 1], top_n));
    }
  }
  return Status::Ok();
}

}  // namespace kvmem::engine
