#include "serve/utf8.h"

#include <cstdint>

namespace kvmem::serve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

std::string Utf8Assembler::Push(std::string_view piece) {
  pending_.append(piece);
  std::string out;
  out.reserve(pending_.size());
  const std::string_view s = pending_;
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    const Utf8Scan scan = ScanUtf8(s.substr(i), &len);
    if (scan == Utf8Scan::kTruncated) break;
    if (scan == Utf8Scan::kValid) {
      out.append(s.substr(i, len));
    } else {
      out.append(kReplacement);
    }
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Assembler::Flush() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace kvmem::serve
