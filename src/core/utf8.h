// UTF-8 as RFC 3629 defines it (no overlong forms, no surrogates, nothing above U+10FFFF), for
// every layer that handles untrusted text: GGUF strings in error messages, the agent store's
// texts and names, request bodies and streamed replies of the server. "Character" means code
// point. Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvmem {

enum class Utf8Scan { kValid, kInvalid, kTruncated };

// Classifies the sequence at the start of non-empty `s`. kValid: *len is its length. kInvalid:
// *len is the length of its maximal invalid subpart (>= 1; replaced by one U+FFFD as WHATWG
// decoders do). kTruncated: a valid prefix of a sequence of *len bytes reaches the end of `s`.
Utf8Scan ScanUtf8(std::string_view s, size_t* len);

// Length in bytes of the well-formed sequence starting at s[i], or 1 if there is none (an
// invalid byte counts as a character of its own). i < s.size().
size_t Utf8CharLen(std::string_view s, size_t i);
bool IsValidUtf8(std::string_view s);
// Offset of the first byte not part of a well-formed sequence (a sequence cut off by the end of
// `s` is invalid), or npos when `s` is valid.
size_t FindInvalidUtf8(std::string_view s);
// The largest character boundary <= n (n <= s.size()): n itself unless it falls inside a
// well-formed multi-byte sequence.
size_t Utf8FloorBoundary(std::string_view s, size_t n);
// Characters in s (Utf8CharLen steps).
size_t Utf8Count(std::string_view s);

// Untrusted text for an error message: quoted, bytes outside printable ASCII (and quote and
// backslash) as \xNN, at most 80 bytes shown.
std::string Quoted(std::string_view s);

}  // namespace kvmem
