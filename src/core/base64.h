// Base64 (RFC 4648, standard alphabet, '=' padding) for binary state kept in JSON (the memory
// policies' scores and positions in an agent's manifest). Thread-safe: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace kvmem {

std::string Base64Encode(std::string_view bytes);
// Corrupt (naming `what`) unless `text` is padded base64 of the standard alphabet.
Result<std::string> Base64Decode(std::string_view text, std::string_view what);

}  // namespace kvmem
