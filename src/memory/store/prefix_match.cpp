#include "memory/store/prefix_match.h"

#include <algorithm>

#include "core/utf8.h"

namespace kvmem::memory::store {

const char* PrefixMatchKindName(PrefixMatchKind kind) {
  switch (kind) {
    case PrefixMatchKind::kExact:
      return "exact";
    case PrefixMatchKind::kExtend:
      return "extend";
    case PrefixMatchKind::kDiverge:
      return "diverge";
  }
  return "?";
}

TextMatch MatchText(std::string_view stored, std::string_view prompt) {
  const size_t n = std::min(stored.size(), prompt.size());
  const size_t common = static_cast<size_t>(
      std::mismatch(stored.begin(), stored.begin() + n, prompt.begin()).first - stored.begin());
  TextMatch m;
  // Equal bytes up to `common`, but the character holding byte `common` may be complete in one
  // text and cut in the other: back off to a boundary of both.
  m.matched_bytes = std::min(Utf8FloorBoundary(stored, common), Utf8FloorBoundary(prompt, common));
  m.matched_chars = Utf8Count(stored.substr(0, m.matched_bytes));
  m.stored_chars = Utf8Count(stored);
  m.ratio = m.stored_chars == 0 ? 1.0 : static_cast<double>(m.matched_chars) / m.stored_chars;
  if (m.matched_bytes == stored.size()) {
    m.kind = stored.size() == prompt.size() ? PrefixMatchKind::kExact : PrefixMatchKind::kExtend;
  } else {
    m.kind = PrefixMatchKind::kDiverge;
  }
  return m;
}

int64_t TokensWithinText(std::span<const int32_t> ids, std::string_view text, size_t limit_bytes,
                         const TokenPieceFn& piece) {
  limit_bytes = std::min(limit_bytes, text.size());
  size_t at = 0;
  int64_t k = 0;
  for (int32_t id : ids) {
    const std::string_view p = piece(id);
    if (p.size() > limit_bytes - at || text.substr(at, p.size()) != p) break;
    at += p.size();
    ++k;
  }
  return k;
}

std::vector<size_t> TokenTextEnds(std::span<const int32_t> ids, const TokenPieceFn& piece) {
  std::vector<size_t> ends(ids.size());
  size_t at = 0;
  for (size_t i = 0; i < ids.size(); ++i) ends[i] = at += piece(ids[i]).size();
  return ends;
}

Result<ReusePlan> PlanReuse(std::string_view stored_text, std::span<const int32_t> stored_ids,
                            std::string_view new_text, const TokenizeFn& tokenize,
                            const TokenPieceFn& piece, const ReuseOptions& options) {
  ReusePlan plan;
  plan.text = MatchText(stored_text, new_text);
  Result<std::vector<int32_t>> new_ids = tokenize(new_text);
  if (!new_ids.ok()) return new_ids.status().WithContext("tokenizing the new prompt");

  const bool usable =
      plan.text.kind != PrefixMatchKind::kDiverge || plan.text.ratio >= options.min_diverge_ratio;
  if (usable) {
    plan.text_matched_tokens =
        piece ? TokensWithinText(stored_ids, stored_text, plan.text.matched_bytes, piece)
              : static_cast<int64_t>(stored_ids.size());
    const size_t n = std::min(
        {stored_ids.size(), new_ids->size(), static_cast<size_t>(plan.text_matched_tokens)});
    const size_t same = static_cast<size_t>(
        std::mismatch(stored_ids.begin(), stored_ids.begin() + n, new_ids->begin()).first -
        stored_ids.begin());
    plan.keep_tokens = static_cast<int64_t>(same);
    // Something must run to produce logits for the next token.
    if (plan.keep_tokens > 0 && same == new_ids->size()) --plan.keep_tokens;
  }
  plan.prefill.assign(new_ids->begin() + plan.keep_tokens, new_ids->end());
  return plan;
}

}  // namespace kvmem::memory::store
