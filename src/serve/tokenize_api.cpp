#include "serve/tokenize_api.h"

#include <limits>

#include "core/utf8.h"
#include "serve/json_body.h"

namespace kvmem::serve {

Result<TokenizeRequest> ParseTokenizeRequest(std::string_view body_text) {
  KVMEM_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  TokenizeRequest r;
  KVMEM_ASSIGN_OR_RETURN(r.content, RequiredString(body, "content", "content"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> add, OptionalBool(body, "add_special", "add_special"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> parse,
                         OptionalBool(body, "parse_special", "parse_special"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> pieces,
                         OptionalBool(body, "with_pieces", "with_pieces"));
  r.add_special = add.value_or(r.add_special);
  r.parse_special = parse.value_or(r.parse_special);
  r.with_pieces = pieces.value_or(r.with_pieces);
  return r;
}

std::string TokenizeJson(const std::vector<TokenPiece>& tokens, bool with_pieces) {
  Json list = Json::array();
  for (const TokenPiece& t : tokens) {
    if (!with_pieces) {
      list.push_back(t.id);
      continue;
    }
    Json piece = t.piece;
    if (!IsValidUtf8(t.piece)) {
      piece = Json::array();
      for (char c : t.piece) piece.push_back(static_cast<unsigned char>(c));
    }
    list.push_back({{"id", t.id}, {"piece", std::move(piece)}});
  }
  return DumpJson({{"tokens", std::move(list)}});
}

Result<std::vector<int32_t>> ParseDetokenizeRequest(std::string_view body_text) {
  KVMEM_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  const Json* tokens = FindField(body, "tokens");
  if (tokens == nullptr) return FieldError("tokens", "required");
  if (!tokens->is_array()) return TypeError("tokens", "an array of token ids", *tokens);
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json& t = (*tokens)[i];
    const std::string field = "tokens[" + std::to_string(i) + "]";
    if (!t.is_number_integer()) return TypeError(field, "an integer", t);
    const bool fits = t.is_number_unsigned()
                          ? t.get<uint64_t>() <= std::numeric_limits<int32_t>::max()
                          : t.get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
                                t.get<int64_t>() <= std::numeric_limits<int32_t>::max();
    if (!fits) return FieldError(field, "is not a token id");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

std::string DetokenizeJson(const std::string& content) { return DumpJson({{"content", content}}); }

}  // namespace kvmem::serve
