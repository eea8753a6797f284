// Internal to grammar/: UTF-8 decoding one byte at a time, as the matcher and the token table
// both need it (they must agree exactly). Well-formed means RFC 3629: no overlongs, surrogates
// or values past U+10FFFF. Thread-safe: pure.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kvmem::engine::grammar {

struct Utf8Partial {
  uint32_t val = 0;  // bits so far
  uint8_t need = 0;  // continuation bytes still to come (0: at a character boundary)
  uint8_t len = 0;   // length of the character being decoded
};

enum class Utf8Step : uint8_t { kInvalid, kPartial, kComplete };

// Feeds `byte` after `*p`. kComplete: the character is [*lo, *lo] (== *hi) and *p is back at a
// boundary. kPartial: the code points the sequence can still become are [*lo, *hi] (well-formed
// ones only, never all surrogates). kInvalid: no well-formed sequence starts this way; *p is
// unspecified.
inline Utf8Step StepUtf8(Utf8Partial* p, uint8_t byte, uint32_t* lo, uint32_t* hi) {
  static constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (p->need == 0) {
    if (byte < 0x80) {
      *p = {byte, 0, 1};
    } else if (byte >= 0xC2 && byte <= 0xDF) {
      *p = {byte & 0x1Fu, 1, 2};
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      *p = {byte & 0x0Fu, 2, 3};
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      *p = {byte & 0x07u, 3, 4};
    } else {
      return Utf8Step::kInvalid;
    }
  } else {
    if ((byte & 0xC0) != 0x80) return Utf8Step::kInvalid;
    p->val = (p->val << 6) | (byte & 0x3Fu);
    --p->need;
  }
  const int shift = 6 * p->need;
  *lo = std::max(p->val << shift, kMinOfLength[p->len]);
  *hi = std::min((p->val << shift) | ((1u << shift) - 1), 0x10FFFFu);
  if (*lo > *hi || (*lo >= 0xD800 && *hi <= 0xDFFF)) return Utf8Step::kInvalid;
  if (p->need > 0) return Utf8Step::kPartial;
  *p = {};
  return Utf8Step::kComplete;
}

// "Free text": the code points a JSON string holds unescaped (and most prose grammars allow):
// everything from U+0020 but '"' and '\'. The token table marks the tokens made only of free
// text; the matcher passes them all at once from a state that loops on every free character.
inline bool IsFreeChar(uint32_t cp) { return cp >= 0x20 && cp != '"' && cp != '\\'; }

}  // namespace kvmem::engine::grammar
