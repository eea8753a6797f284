// Reads a TokenizerConfig out of a GGUF file's tokenizer.* metadata, with llama.cpp's defaults
// for keys a file leaves out (SentencePiece: bos 1, eos 2, unk 0, add_bos, add_space_prefix;
// Llama-3 pre-tokenizer: add_bos).
//
// Thread-safe: a pure function of the (immutable) file.
#pragma once

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::tokenizer {

// Errors name the missing or malformed key.
Result<TokenizerConfig> TokenizerConfigFromGguf(const gguf::GgufFile& file);

// TokenizerConfigFromGguf + Tokenizer::Create.
Result<Tokenizer> LoadTokenizer(const gguf::GgufFile& file);

}  // namespace kvmem::tokenizer
