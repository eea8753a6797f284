// Where a piece of a text lies among the text's tokens: e.g. the question inside a rendered chat
// prompt, whose tokens alone then score a retrieval memory's blocks.
//
//   const std::vector<int32_t> ids = tok.Encode(text, /*add_special=*/false, true);
//   Result<TokenSpan> q = FindTokenSpan(tok, text, ids, "Where is the notebook?");
//   // ids[q->begin, q->end) spell the question (a leading-space token included)
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::tokenizer {

// Tokens [begin, end) of a text's or a turn's tokens; end < 0: to the end.
struct TokenSpan {
  int64_t begin = 0;
  int64_t end = -1;
  bool operator==(const TokenSpan&) const = default;
};

// The tokens of `part` at its last place in `text`, where `tokens` = tok.Encode(text, false,
// /*parse_special=*/true). A token straddling one of the part's ends (a word's leading space
// merged into its first token) counts as the part's: each end moves back to the nearest token
// boundary at most 8 bytes before it. NotFound when `part` is empty or not in `text`;
// OutOfRange when no token boundary lies that close to one of its ends.
Result<TokenSpan> FindTokenSpan(const Tokenizer& tok, std::string_view text,
                                std::span<const int32_t> tokens, std::string_view part);

}  // namespace kvmem::tokenizer
