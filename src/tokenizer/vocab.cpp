#include "tokenizer/vocab.h"

#include <utility>

namespace kvmem::tokenizer {

Result<Vocab> Vocab::Create(std::vector<std::string> tokens, std::vector<int32_t> types,
                            std::vector<float> scores) {
  const size_t n = tokens.size();
  if (n == 0) return InvalidArgument("vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return OutOfRange("vocabulary too large");
  if (!types.empty() && types.size() != n) {
    return Corrupt("token_type has " + std::to_string(types.size()) + " entries for " +
                   std::to_string(n) + " tokens");
  }
  if (!scores.empty() && scores.size() != n) {
    return Corrupt("scores has " + std::to_string(scores.size()) + " entries for " +
                   std::to_string(n) + " tokens");
  }
  Vocab v;
  v.texts_ = std::move(tokens);
  v.types_.resize(n, TokenType::kNormal);
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] < 0 || types[i] > static_cast<int32_t>(TokenType::kByte)) {
      return Corrupt("token " + std::to_string(i) + " has unknown type " +
                     std::to_string(types[i]));
    }
    v.types_[i] = static_cast<TokenType>(types[i]);
  }
  v.scores_ = scores.empty() ? std::vector<float>(n, 0.0f) : std::move(scores);
  v.index_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    v.index_[std::string_view(v.texts_[i])] = static_cast<int32_t>(i);
  }
  return v;
}

}  // namespace kvmem::tokenizer
