// Deciding how much of an agent's stored cache a new prompt can reuse (semantic.md §3.3).
// BPE is not compositional (tokenize(A + B) != tokenize(A) + tokenize(B)), so the stored token
// ids of the previous turn need not be a prefix of the new prompt's ids even when its text is.
// The match is therefore made on the rendered text first, at character level:
//
//   EXACT    stored text == new text
//   EXTEND   stored text is a proper prefix of the new text
//   DIVERGE  the common prefix is shorter than the stored text (ratio = matched / stored chars)
//
// and then confirmed on tokens: a stored token can be kept if its text ends within the matched
// characters and its id equals the id at the same index of the new text's tokenization. Keeping
// exactly the common prefix of the two id sequences means the reused cache is the one a cold
// prefill of the new prompt would build (the 1-2 tokens around a shifted merge are recomputed)
// rather than a cache of a tokenization the model would never see; the cost is one tokenization
// of the new text, small next to prefill.
//
// Plan, then apply (STYLE.md): PlanReuse mutates nothing; the caller truncates its loaded
// sequence to keep_tokens and prefills `prefill`. Thread-safe: pure functions (the callbacks
// must be safe to call from the calling thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvmem::memory::store {

enum class PrefixMatchKind { kExact, kExtend, kDiverge };
const char* PrefixMatchKindName(PrefixMatchKind kind);  // "exact", "extend", "diverge"

struct TextMatch {
  PrefixMatchKind kind = PrefixMatchKind::kExact;
  // The common prefix, ending on a character boundary of both texts (never inside a UTF-8
  // sequence), in bytes and in characters.
  size_t matched_bytes = 0;
  size_t matched_chars = 0;
  size_t stored_chars = 0;
  // matched_chars / stored_chars; 1 when the stored text is empty.
  double ratio = 1.0;
};

TextMatch MatchText(std::string_view stored, std::string_view prompt);

// The ids `text` prefills as: the same convention (BOS, special tokens) as the stored ids.
using TokenizeFn = std::function<Result<std::vector<int32_t>>(std::string_view text)>;
// The bytes of one token's text as it appears in the rendered prompt (e.g.
// Tokenizer::TokenToPiece(id, /*render_special=*/true) when templates render special tokens
// as text; "" for a BOS the text does not spell).
using TokenPieceFn = std::function<std::string_view(int32_t id)>;

struct ReuseOptions {
  // A DIVERGE match reuses the cache only when at least this fraction of the stored text
  // matched (the paper's 80%); below it re-prefilling everything is preferred.
  double min_diverge_ratio = 0.8;
};

struct ReusePlan {
  TextMatch text;
  // Stored rows to keep: the sequence is truncated to keep_tokens (0 = discard the cache).
  int64_t keep_tokens = 0;
  // Ids to prefill after the kept rows: the new text's ids from index keep_tokens on. Never
  // empty when the new text has tokens: if everything would be kept (EXACT), the last token is
  // prefilled again, since a forward pass is what yields the next-token logits.
  std::vector<int32_t> prefill;
  // Tokens of the stored prefix whose text lies within the match (before the id check).
  int64_t text_matched_tokens = 0;
  bool reuse() const { return keep_tokens > 0; }
};

// How many leading tokens of `ids` spell a prefix of `text` that ends at or before limit_bytes,
// with each token's piece equal to the text at its place (so a piece mismatch stops the count).
int64_t TokensWithinText(std::span<const int32_t> ids, std::string_view text, size_t limit_bytes,
                         const TokenPieceFn& piece);

// The byte offset in the rendered text where each token's text ends (running sum of the
// pieces): what AgentStore::Save takes as token_text_ends to record block text spans.
std::vector<size_t> TokenTextEnds(std::span<const int32_t> ids, const TokenPieceFn& piece);

// Plans the reuse of a cache built from stored_ids (the tokens of stored_text) for new_text.
// piece may be empty: then only the id comparison limits what is kept.
Result<ReusePlan> PlanReuse(std::string_view stored_text, std::span<const int32_t> stored_ids,
                            std::string_view new_text, const TokenizeFn& tokenize,
                            const TokenPieceFn& piece, const ReuseOptions& options = {});

}  // namespace kvmem::memory::store
