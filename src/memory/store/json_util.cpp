#include "memory/store/json_util.h"

namespace kvmem::memory::store {
namespace {

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

const char* TypeName(const Json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a float";
  return v.type_name();
}

}  // namespace

bool JsonNestsDeeperThan(std::string_view s, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > limit) return true;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return false;
}

Result<Json> ParseUntrustedJson(std::string_view text, int max_depth, std::string_view what) {
  const std::string w(what);
  if (JsonNestsDeeperThan(text, max_depth)) {
    return Corrupt(w + ": JSON nests deeper than " + std::to_string(max_depth) + " levels");
  }
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Corrupt(w + ": not valid JSON (or not UTF-8)");
  return j;
}

Result<const Json*> JsonField(const Json& obj, std::string_view key, const std::string& path) {
  if (!obj.is_object()) {
    return Corrupt((path.empty() ? std::string("document") : path) + " is not a JSON object");
  }
  auto it = obj.find(key);
  if (it == obj.end()) return Corrupt("field '" + Join(path, key) + "' is missing");
  return &*it;
}

Result<std::string> JsonString(const Json& obj, std::string_view key, const std::string& path) {
  KVMEM_ASSIGN_OR_RETURN(const Json* v, JsonField(obj, key, path));
  if (!v->is_string()) {
    return Corrupt("field '" + Join(path, key) + "' is " + TypeName(*v) + ", expected a string");
  }
  return v->get<std::string>();
}

Result<int64_t> JsonIntValue(const Json& v, const std::string& path, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) {
    return Corrupt("field '" + path + "' is " + TypeName(v) + ", expected an integer");
  }
  const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
  if (too_big || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return Corrupt("field '" + path + "' = " + v.dump() + " is outside [" + std::to_string(lo) +
                   ", " + std::to_string(hi) + "]");
  }
  return v.get<int64_t>();
}

Result<int64_t> JsonInt(const Json& obj, std::string_view key, const std::string& path, int64_t lo,
                        int64_t hi) {
  KVMEM_ASSIGN_OR_RETURN(const Json* v, JsonField(obj, key, path));
  return JsonIntValue(*v, Join(path, key), lo, hi);
}

Result<const Json*> JsonArray(const Json& obj, std::string_view key, const std::string& path) {
  KVMEM_ASSIGN_OR_RETURN(const Json* v, JsonField(obj, key, path));
  if (!v->is_array()) {
    return Corrupt("field '" + Join(path, key) + "' is " + TypeName(*v) + ", expected an array");
  }
  return v;
}

Result<const Json*> JsonObject(const Json& obj, std::string_view key, const std::string& path) {
  KVMEM_ASSIGN_OR_RETURN(const Json* v, JsonField(obj, key, path));
  if (!v->is_object()) {
    return Corrupt("field '" + Join(path, key) + "' is " + TypeName(*v) + ", expected an object");
  }
  return v;
}

}  // namespace kvmem::memory::store
