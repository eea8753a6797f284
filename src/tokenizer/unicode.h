// UTF-8 decoding that never fails, Unicode category classes for the pre-tokenizer regexes, and
// GPT-2's byte <-> printable-codepoint mapping used by byte-level BPE vocabularies.
//
// Malformed UTF-8 (stray continuation bytes, truncated or overlong sequences, surrogates) decodes
// one byte at a time as a "raw byte" with no category flags, so any input can be tokenized and
// the original bytes survive the round trip.
//
// Thread-safe: pure functions over constant tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvmem::tokenizer {

// Major general-category class of a code point, the White_Space property, and the letter case
// classes the o200k regex names (\p{Lu}|\p{Lt}, \p{Ll}; Lm and Lo letters have neither).
enum CodepointFlag : uint16_t {
  kCpLetter = 1,       // \p{L}
  kCpNumber = 2,       // \p{N}
  kCpMark = 4,         // \p{M}
  kCpPunct = 8,        // \p{P}
  kCpSymbol = 16,      // \p{S}
  kCpSeparator = 32,   // \p{Z}
  kCpWhitespace = 64,  // \s (White_Space)
  kCpUpper = 128,      // \p{Lu} or \p{Lt}
  kCpLower = 256,      // \p{Ll}
};

// Flags of a code point; 0 for control/unassigned/private-use and for values past U+10FFFF.
uint16_t CodepointFlags(uint32_t cp);

struct Utf8Char {
  uint32_t cp = 0;  // the code point, or the byte value when !valid
  uint8_t len = 1;  // bytes consumed, 1..4
  bool valid = true;
};

// Decodes the character starting at text[pos] (pos < text.size()). Invalid or truncated sequences
// consume exactly one byte and come back with valid == false.
Utf8Char DecodeUtf8(std::string_view text, size_t pos);

// Flags of a decoded character: raw (invalid) bytes have none.
inline uint16_t CharFlags(const Utf8Char& c) { return c.valid ? CodepointFlags(c.cp) : 0; }

// Length of the UTF-8 sequence a lead byte announces: 1..4, or 0 for a continuation or an
// invalid lead byte.
int Utf8SequenceLength(uint8_t lead);

// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

// Number of leading bytes of `bytes` that form complete characters, leaving out a final sequence
// that is a valid prefix of a character still waiting for its continuation bytes. Invalid bytes
// count as complete (they will never become valid).
size_t CompleteUtf8Prefix(std::string_view bytes);

// GPT-2 byte-level alphabet: every byte maps to one printable code point (e.g. ' ' -> U+0120 'Ġ').
uint32_t ByteToUnicode(uint8_t byte);
// Inverse of ByteToUnicode; returns -1 for a code point outside the alphabet.
int UnicodeToByte(uint32_t cp);

namespace internal {
extern const char kUnicodeVersion[];
// Generated (unicode_tables.cpp): (flags << 21) | first_codepoint, sorted; each range runs until
// the next entry.
extern const uint32_t kCategoryRanges[];
extern const size_t kNumCategoryRanges;
}  // namespace internal

}  // namespace kvmem::tokenizer
