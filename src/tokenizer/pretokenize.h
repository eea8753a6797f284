// Pre-tokenizers for byte-level BPE: split text into words before BPE merges run, so merges
// never cross a word boundary. Each kind is a hand-written matcher equivalent to the regex the
// model's Hugging Face tokenizer.json uses (leftmost match, alternatives tried in order, greedy
// quantifiers); llama.cpp names them in the GGUF key tokenizer.ggml.pre.
//
//   kGpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kSmolLm  every \p{N} isolated first, then kGpt2 on the stretches between (SmolLM, StarCoder)
//   kLlama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2   kLlama3 with \p{N} instead of \p{N}{1,3}
//   kGpt4o   o200k (GPT-4o, GPT-OSS, Llama 4), as tiktoken and the models' tokenizer.json:
//            [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+C?|
//            [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*C?|
//            \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//            with C = (?i:'s|'t|'re|'ve|'m|'ll|'d). llama.cpp runs an ASCII-only rewrite of it
//            (non-ASCII letters count as both cases, marks as no letter); kvmem follows the
//            original, which the models were trained with.
//   kDefault llama.cpp's fallback for tokenizer.ggml.pre "default" or absent (old or unusual
//            conversions; llama.cpp warns that quality degrades): the regexes
//            [\p{P}\$\+<=>\^~\|]+, then kGpt2's, then \p{N}+, then [0-9][0-9][0-9], each
//            cutting the words of the one before and keeping the text between its matches.
//
// Bytes that are not valid UTF-8 count as "other" characters (neither letter, number nor space).
//
// Thread-safe: pure functions.
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvmem::tokenizer {

enum class PreTokenizerKind { kGpt2, kSmolLm, kLlama3, kQwen2, kGpt4o, kDefault };

// Maps a tokenizer.ggml.pre value ("smollm", "llama-bpe", "qwen2", "gpt-4o", "gpt2", ...) to its
// kind, with llama.cpp's name table. "default" and "" (a GGUF without the key) map to kDefault,
// as in llama.cpp. Unknown names are kUnsupported, naming the value (llama.cpp refuses them too).
Result<PreTokenizerKind> PreTokenizerFromName(std::string_view name);

const char* PreTokenizerName(PreTokenizerKind kind);

// Pre names whose tokenizer.json normalizes text to NFC before pre-tokenizing (Qwen2, 2.5 and
// 3, and the Qwen-based DeepSeek-R1 distills). Hugging Face applies it; llama.cpp does not, so
// kvmem follows Hugging Face here: a decomposed "e\u0301" becomes the token of "\u00e9".
bool PreNormalizesNfc(std::string_view name);

// Pre names whose models follow Llama-3's tokenizer.json: BPE with ignore_merges (a word that
// is itself a token is not merged up from bytes) and BOS added by default (llama.cpp's rule).
bool IsLlama3StylePre(std::string_view name);

// Appends the words of `text` to `words`: non-empty views into `text` that concatenate to it.
void PreTokenize(PreTokenizerKind kind, std::string_view text,
                 std::vector<std::string_view>* words);

}  // namespace kvmem::tokenizer
