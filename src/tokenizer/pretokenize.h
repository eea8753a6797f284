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
//
// Bytes that are not valid UTF-8 count as "other" characters (neither letter, number nor space).
//
// Thread-safe: pure functions.
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvmem::tokenizer {

enum class PreTokenizerKind { kGpt2, kSmolLm, kLlama3, kQwen2 };

// Maps a tokenizer.ggml.pre value ("smollm", "llama-bpe", "qwen2", "gpt2", ...) to its kind.
// "default" and "" (old GGUFs) map to kGpt2; llama.cpp's fallback for them additionally cuts
// punctuation runs and digit triples first, which kvmem does not reproduce. Unknown names are
// kUnsupported.
Result<PreTokenizerKind> PreTokenizerFromName(std::string_view name);

const char* PreTokenizerName(PreTokenizerKind kind);

// Pre names whose models follow Llama-3's tokenizer.json: BPE with ignore_merges (a word that
// is itself a token is not merged up from bytes) and BOS added by default (llama.cpp's rule).
bool IsLlama3StylePre(std::string_view name);

// Appends the words of `text` to `words`: non-empty views into `text` that concatenate to it.
void PreTokenize(PreTokenizerKind kind, std::string_view text,
                 std::vector<std::string_view>* words);

}  // namespace kvmem::tokenizer
