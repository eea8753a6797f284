#include "tokenizer/token_span.h"

#include <algorithm>
#include <string>
#include <vector>

namespace kvmem::tokenizer {
namespace {

// The number of tokens before byte `end` of `text`, or before a little less of it: the longest
// prefix of at most 8 bytes less whose tokens begin `tokens`; -1 when there is none.
int64_t TokensBefore(const Tokenizer& tok, std::string_view text, size_t end,
                     std::span<const int32_t> tokens) {
  if (end == 0) return 0;
  for (size_t cut = end; cut + 8 >= end && cut > 0; --cut) {
    const std::vector<int32_t> head =
        tok.Encode(text.substr(0, cut), /*add_special=*/false, /*parse_special=*/true);
    if (head.size() <= tokens.size() && std::equal(head.begin(), head.end(), tokens.begin())) {
      return static_cast<int64_t>(head.size());
    }
  }
  return -1;
}

}  // namespace

Result<TokenSpan> FindTokenSpan(const Tokenizer& tok, std::string_view text,
                                std::span<const int32_t> tokens, std::string_view part) {
  const size_t at = part.empty() ? std::string_view::npos : text.rfind(part);
  if (at == std::string_view::npos) return NotFound("the text does not contain it");
  const int64_t begin = TokensBefore(tok, text, at, tokens);
  const int64_t end = TokensBefore(tok, text, at + part.size(), tokens);
  if (begin < 0 || end < 0) {
    const size_t byte = begin < 0 ? at : at + part.size();
    return OutOfRange("no token boundary near byte " + std::to_string(byte));
  }
  return TokenSpan{begin, end};
}

}  // namespace kvmem::tokenizer
