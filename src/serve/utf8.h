// UTF-8 checks for untrusted request bodies and reassembly of generated text. Tokens are byte
// sequences: one multi-byte character may be split across two text pieces, and a random model
// can emit bytes that never form a character. JSON must carry valid UTF-8, so the stream holds
// back an incomplete tail until it completes and replaces bytes that cannot (U+FFFD).
// Thread-safety: functions are pure; a Utf8Assembler belongs to one stream.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvmem::serve {

// Offset of the first byte that is not part of a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or npos when `s` is valid. A
// sequence cut off by the end of `s` is invalid.
size_t FindInvalidUtf8(std::string_view s);

class Utf8Assembler {
 public:
  // Returns the text that is now complete: valid sequences as they are, each maximal invalid
  // subpart replaced by U+FFFD (as WHATWG decoders do); an incomplete tail is kept for later.
  std::string Push(std::string_view piece);
  // The end of the stream: a kept incomplete tail becomes U+FFFD.
  std::string Flush();

 private:
  std::string pending_;
};

}  // namespace kvmem::serve
