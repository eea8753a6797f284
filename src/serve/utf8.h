// UTF-8 checks for untrusted request bodies and reassembly of generated text. Tokens are byte
// sequences: one multi-byte character may be split across two text pieces, and a random model
// can emit bytes that never form a character. JSON must carry valid UTF-8, so the stream holds
// back an incomplete tail until it completes and replaces bytes that cannot (U+FFFD).
// The checks themselves are core/utf8.h. Thread-safety: a Utf8Assembler belongs to one stream.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/utf8.h"  // FindInvalidUtf8, ScanUtf8

namespace kvmem::serve {

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
