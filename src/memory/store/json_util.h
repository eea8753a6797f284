// Reading untrusted JSON (manifests, safetensors headers) without exceptions: a nesting limit
// checked before the parser builds anything, and typed field access whose errors name the field
// by its path ("blocks[3].n_rows"). Every error is Corrupt. Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvmem::memory::store {

using Json = nlohmann::json;

// True if s has more than `limit` levels of nested arrays/objects (strings skipped).
bool JsonNestsDeeperThan(std::string_view s, int limit);

// `what` prefixes every message ("manifest", "safetensors header").
Result<Json> ParseUntrustedJson(std::string_view text, int max_depth, std::string_view what);

// obj[key] where obj is an object, or Corrupt "<path>.<key> is missing".
Result<const Json*> JsonField(const Json& obj, std::string_view key, const std::string& path);
Result<std::string> JsonString(const Json& obj, std::string_view key, const std::string& path);
// Integers in [lo, hi]; floats, strings and out-of-range values are Corrupt.
Result<int64_t> JsonInt(const Json& obj, std::string_view key, const std::string& path, int64_t lo,
                        int64_t hi);
Result<int64_t> JsonIntValue(const Json& v, const std::string& path, int64_t lo, int64_t hi);
Result<const Json*> JsonArray(const Json& obj, std::string_view key, const std::string& path);
Result<const Json*> JsonObject(const Json& obj, std::string_view key, const std::string& path);

}  // namespace kvmem::memory::store
