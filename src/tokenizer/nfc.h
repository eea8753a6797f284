// Unicode normalization form C (UAX #15): canonical decomposition, canonical ordering of
// combining marks, canonical composition. Qwen2's tokenizer.json runs it on the text before
// pre-tokenizing (pretokenize.h: PreNormalizesNfc), so a decomposed "e" + U+0301 encodes like
// the precomposed U+00E9.
//
// Bytes that are not valid UTF-8 pass through unchanged and block composition across them.
//
// Thread-safe: pure functions over constant tables (the composition map is built once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvmem::tokenizer {

// The NFC form of `text`. Text whose code points all lie below U+0300 (ASCII, Latin-1, most of
// Latin Extended) is already NFC and is returned as is without decoding.
std::string NormalizeNfc(std::string_view text);

// The NFD of the code points [first, last), appended to `out`: their canonical decompositions
// (Hangul syllables by the algorithm), then canonical ordering of the runs of non-starters.
void AppendNfd(const uint32_t* first, const uint32_t* last, std::vector<uint32_t>* out);

// Canonical combining class of a code point (0 for starters and values past U+10FFFF).
uint8_t CanonicalCombiningClass(uint32_t cp);

namespace internal {
struct CanonicalDecomposition {
  uint32_t cp;
  uint32_t first;
  uint32_t second;  // 0 for a singleton decomposition
  bool composes;    // NFC composes first + second back into cp
};
// Generated (nfc_tables.cpp by scripts/gen_nfc_tables.py).
extern const uint32_t kCanonicalCombiningClasses[];
extern const size_t kNumCanonicalCombiningClasses;
extern const CanonicalDecomposition kCanonicalDecompositions[];
extern const size_t kNumCanonicalDecompositions;
}  // namespace internal

}  // namespace kvmem::tokenizer
