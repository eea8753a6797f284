#include "serve/json_body.h"

#include <limits>

#include "serve/utf8.h"

namespace kvmem::serve {
namespace {

// Offset of the first bracket nested deeper than kMaxJsonDepth, or npos. Brackets inside
// strings do not count. nlohmann's parser is iterative, but our own recursive walks (and the
// stack of the JSON value) should not have to trust the client's nesting.
size_t FindTooDeep(std::string_view s) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

}  // namespace

Result<Json> ParseJsonObject(std::string_view body) {
  if (const size_t bad = FindInvalidUtf8(body); bad != std::string_view::npos) {
    return InvalidArgument("request body is not valid UTF-8 (byte offset " + std::to_string(bad) +
                           ")");
  }
  if (const size_t deep = FindTooDeep(body); deep != std::string_view::npos) {
    return InvalidArgument("request body nests JSON deeper than " + std::to_string(kMaxJsonDepth) +
                           " levels (byte offset " + std::to_string(deep) + ")");
  }
  Json value;
  try {
    value = Json::parse(body.begin(), body.end());
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("request body is not valid JSON: ") + e.what());
  }
  if (!value.is_object()) {
    return InvalidArgument(std::string("request body must be a JSON object, got ") +
                           JsonTypeName(value));
  }
  return value;
}

const char* JsonTypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::string:
      return "string";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    case Json::value_t::null:
      return "null";
    default:
      break;
  }
  return "unknown";
}

Status TypeError(std::string_view field, std::string_view expected, const Json& value) {
  return FieldError(field, "expected " + std::string(expected) + ", got " + JsonTypeName(value));
}

Status FieldError(std::string_view field, std::string_view problem) {
  return InvalidArgument("'" + std::string(field) + "': " + std::string(problem));
}

const Json* FindField(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<std::optional<std::string>> OptionalString(const Json& obj, std::string_view key,
                                                  std::string_view field) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return TypeError(field, "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

Result<std::string> RequiredString(const Json& obj, std::string_view key, std::string_view field) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return FieldError(field, "required");
  if (!v->is_string()) return TypeError(field, "a string", *v);
  return v->get<std::string>();
}

Result<std::optional<int64_t>> OptionalInt(const Json& obj, std::string_view key,
                                           std::string_view field) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(field, "integer out of range");
    }
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (!v->is_number_integer()) return TypeError(field, "an integer", *v);
  return std::optional<int64_t>(v->get<int64_t>());
}

Result<std::optional<double>> OptionalNumber(const Json& obj, std::string_view key,
                                             std::string_view field) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return TypeError(field, "a number", *v);
  return std::optional<double>(v->get<double>());
}

Result<std::optional<bool>> OptionalBool(const Json& obj, std::string_view key,
                                         std::string_view field) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return TypeError(field, "a boolean", *v);
  return std::optional<bool>(v->get<bool>());
}

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace kvmem::serve
