// Reading untrusted JSON request bodies: parsing with every failure as a Status (never an
// exception past this file), and typed access to optional fields whose errors name the field,
// e.g. "'max_tokens': expected an integer, got string". Unknown fields are the caller's to
// ignore. Writing: DumpJson never throws on invalid UTF-8.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvmem::serve {

using Json = nlohmann::json;

// Arrays and objects nested deeper than this are rejected before parsing; API bodies need ~5.
inline constexpr int kMaxJsonDepth = 64;

// The body as one JSON object. InvalidArgument (with the byte offset) for invalid UTF-8,
// nesting deeper than kMaxJsonDepth, malformed JSON, or a top-level value that is not an
// object.
Result<Json> ParseJsonObject(std::string_view body);

// "string", "integer", "number", "boolean", "array", "object", "null".
const char* JsonTypeName(const Json& value);

// InvalidArgument("'<field>': expected <expected>, got <type of value>").
Status TypeError(std::string_view field, std::string_view expected, const Json& value);
// InvalidArgument("'<field>': <problem>").
Status FieldError(std::string_view field, std::string_view problem);

// The member `key` of `obj`, or nullptr when absent or null (the APIs treat both as unset).
const Json* FindField(const Json& obj, std::string_view key);

// Optional fields of `obj` by type. `field` is the name used in errors (a path such as
// "messages[2].role" for nested fields). Absent or null: nullopt. An integer must be a JSON
// integer (10, not 10.0) within int64; a number may be either.
Result<std::optional<std::string>> OptionalString(const Json& obj, std::string_view key,
                                                  std::string_view field);
// A string field that must be present: InvalidArgument "'<field>': required" otherwise.
Result<std::string> RequiredString(const Json& obj, std::string_view key, std::string_view field);
Result<std::optional<int64_t>> OptionalInt(const Json& obj, std::string_view key,
                                           std::string_view field);
Result<std::optional<double>> OptionalNumber(const Json& obj, std::string_view key,
                                             std::string_view field);
Result<std::optional<bool>> OptionalBool(const Json& obj, std::string_view key,
                                         std::string_view field);

// Compact serialization; invalid UTF-8 in strings becomes U+FFFD instead of throwing.
std::string DumpJson(const Json& value);

}  // namespace kvmem::serve
