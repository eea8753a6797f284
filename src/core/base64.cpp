#include "core/base64.h"

#include <cstdint>
#include <cstring>

namespace kvmem {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view text, std::string_view what) {
  const auto bad = [&] { return Corrupt(std::string(what) + " is not base64"); };
  if (text.size() % 4 != 0) return bad();
  std::string bytes;
  bytes.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = text[i + j];
      const char* p = c == '=' || c == '\0' ? nullptr : std::strchr(kAlphabet, c);
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        ++pad;
      } else if (p == nullptr || pad > 0) {
        return bad();
      }
      n = (n << 6) | (p ? static_cast<uint32_t>(p - kAlphabet) : 0);
    }
    bytes += static_cast<char>(n >> 16);
    if (pad < 2) bytes += static_cast<char>((n >> 8) & 255);
    if (pad < 1) bytes += static_cast<char>(n & 255);
  }
  return bytes;
}

}  // namespace kvmem
