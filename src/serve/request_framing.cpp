#include "serve/request_framing.h"

#include <algorithm>
#include <cstdint>

namespace kvmem::serve {
namespace {

constexpr size_t kNone = std::string_view::npos;

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// A non-negative number in `base` (10 or 16) spelling all of `s`; false when empty, not a
// number or above 2^62.
bool ParseNumber(std::string_view s, int base, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (base == 16 && Lower(c) >= 'a' && Lower(c) <= 'f') d = Lower(c) - 'a' + 10;
    if (d < 0) return false;
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    if (v > (uint64_t{1} << 62)) return false;
  }
  *out = v;
  return true;
}

// The offset just past the blank line that ends the headers, or kNone.
size_t EndOfHeaders(std::string_view bytes) {
  for (size_t i = bytes.find('\n'); i != kNone; i = bytes.find('\n', i + 1)) {
    if (i + 1 < bytes.size() && bytes[i + 1] == '\n') return i + 2;
    if (i + 2 < bytes.size() && bytes[i + 1] == '\r' && bytes[i + 2] == '\n') return i + 3;
  }
  return kNone;
}

// Whether a chunked body starting at bytes[at] is complete (last chunk and trailer), or
// malformed (then the library answers it).
bool ChunkedBodyReady(std::string_view bytes, size_t at) {
  for (;;) {
    const size_t eol = bytes.find('\n', at);
    if (eol == kNone) return false;
    std::string_view size_line = bytes.substr(at, eol - at);
    size_line = Trim(size_line.substr(0, size_line.find(';')));  // chunk extensions
    uint64_t size = 0;
    if (!ParseNumber(size_line, 16, &size)) return true;
    at = eol + 1;
    if (size == 0) break;
    if (bytes.size() - at < size + 2) return false;  // the data and its CRLF
    at += size + 2;
  }
  // Trailer fields, then a blank line.
  for (;;) {
    const size_t eol = bytes.find('\n', at);
    if (eol == kNone) return false;
    if (Trim(bytes.substr(at, eol - at)).empty()) return true;
    at = eol + 1;
  }
}

}  // namespace

RequestFraming ScanRequest(std::string_view bytes, const RequestFramingLimits& limits) {
  RequestFraming f;
  f.started = !bytes.empty();
  const size_t body_at = EndOfHeaders(bytes);
  if (body_at == kNone) {
    f.ready = bytes.size() > limits.max_header_bytes;
    return f;
  }
  const size_t body_bytes = bytes.size() - body_at;
  bool chunked = false;
  bool has_length = false;
  uint64_t length = 0;
  std::string_view headers = bytes.substr(0, body_at);
  headers.remove_prefix(std::min(headers.size(), headers.find('\n') + 1));  // the request line
  while (!headers.empty()) {
    const size_t eol = headers.find('\n');
    const std::string_view line = headers.substr(0, eol);
    headers.remove_prefix(eol == kNone ? headers.size() : eol + 1);
    const size_t colon = line.find(':');
    if (colon == kNone) continue;
    const std::string_view name = Trim(line.substr(0, colon));
    const std::string_view value = Trim(line.substr(colon + 1));
    if (IEquals(name, "Content-Length")) {
      if (has_length || !ParseNumber(value, 10, &length)) {
        f.ready = true;  // the library's error
        return f;
      }
      has_length = true;
    } else if (IEquals(name, "Transfer-Encoding")) {
      chunked = value.size() >= 7 && IEquals(value.substr(value.size() - 7), "chunked");
    } else if (IEquals(name, "Expect") && IEquals(value, "100-continue")) {
      f.ready = true;
      return f;
    }
  }
  if (body_bytes >= limits.read_ahead_bytes) {
    f.ready = true;
  } else if (chunked) {
    f.ready = ChunkedBodyReady(bytes, body_at);
  } else if (has_length) {
    f.ready = length > limits.max_body_bytes || body_bytes >= length;
  } else {
    f.ready = true;  // no body
  }
  return f;
}

}  // namespace kvmem::serve
