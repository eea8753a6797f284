// UTF-8 helpers for prefix matching at character level and for the text kept in manifests.
// "Character" here means code point: a match never ends inside a multi-byte sequence. Invalid
// bytes count as one character each, so any byte string has well-defined boundaries.
// Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvmem::memory::store {

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF): what a JSON string may hold.
bool IsValidUtf8(std::string_view s);

// Length in bytes of the well-formed sequence starting at s[i], or 1 if it is not one (an
// invalid byte is a character of its own). i < s.size().
size_t Utf8CharLen(std::string_view s, size_t i);

// The largest character boundary <= n (n <= s.size()): n itself unless it falls inside a
// well-formed multi-byte sequence.
size_t Utf8FloorBoundary(std::string_view s, size_t n);

// Characters in s (Utf8CharLen steps).
size_t Utf8Count(std::string_view s);

// Untrusted text for an error message: quoted, non-printable bytes as \xNN, at most 80 bytes.
std::string Quoted(std::string_view s);

}  // namespace kvmem::memory::store
