// llama.cpp's tokenizer endpoints, in its server's shapes, so its clients and scripts work:
//
//   POST /tokenize    {"content": TEXT, "add_special": false, "parse_special": true,
//                      "with_pieces": false}
//                  -> {"tokens": [ID, ...]}, or with_pieces {"tokens": [{"id": ID, "piece": P}]}
//                     where P is the token's text, or its bytes as an array of numbers when
//                     they are not valid UTF-8 by themselves (a character split across tokens)
//   POST /detokenize  {"tokens": [ID, ...]}  ->  {"content": TEXT}  (control tokens written out)
//
// add_special adds BOS/EOS where the model's tokenizer adds them; parse_special turns
// control-token texts such as "<|im_start|>" into their ids (as the chat endpoints do).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/api_types.h"

namespace kvmem::serve {

struct TokenizeRequest {
  std::string content = {};
  bool add_special = false;
  bool parse_special = true;
  bool with_pieces = false;
};

Result<TokenizeRequest> ParseTokenizeRequest(std::string_view body);
std::string TokenizeJson(const std::vector<TokenPiece>& tokens, bool with_pieces);

// The ids of a /detokenize body: InvalidArgument naming "tokens[i]" for a non-integer or one
// outside int32 (the backend checks the vocabulary).
Result<std::vector<int32_t>> ParseDetokenizeRequest(std::string_view body);
std::string DetokenizeJson(const std::string& content);

}  // namespace kvmem::serve
