// Typed metadata getters of GgufFile (declared in gguf_file.h).
#include <cstring>
#include <limits>
#include <string>

#include "gguf/gguf_file.h"

namespace kvmem::gguf {
namespace {

std::string Named(std::string_view key) { return "metadata key '" + std::string(key) + "'"; }

Status WrongType(std::string_view key, const Value& v, std::string_view expected) {
  return Corrupt(Named(key) + " has type " + v.TypeName() + ", expected " + std::string(expected));
}

Result<const Value*> Require(const GgufFile& f, std::string_view key) {
  const Value* v = f.Find(key);
  if (v == nullptr) return NotFound("missing " + Named(key));
  return v;
}

Result<const Array*> RequireArray(const GgufFile& f, std::string_view key,
                                  std::string_view expected) {
  KVMEM_ASSIGN_OR_RETURN(const Value* v, Require(f, key));
  if (v->type() != ValueType::kArray) return WrongType(key, *v, expected);
  return v->AsArray();
}

}  // namespace

Result<uint64_t> GgufFile::GetUint(std::string_view key) const {
  KVMEM_ASSIGN_OR_RETURN(const Value* v, Require(*this, key));
  if (!IsIntegerType(v->type())) return WrongType(key, *v, "an unsigned integer");
  std::optional<uint64_t> u = v->AsUint();
  if (!u) {
    return OutOfRange(Named(key) + " holds " + std::to_string(*v->AsInt()) +
                      ", expected an unsigned integer");
  }
  return *u;
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  KVMEM_ASSIGN_OR_RETURN(const Value* v, Require(*this, key));
  if (!IsIntegerType(v->type())) return WrongType(key, *v, "an integer");
  std::optional<int64_t> i = v->AsInt();
  if (!i) return OutOfRange(Named(key) + " holds " + std::to_string(*v->AsUint()) + " > int64");
  return *i;
}

Result<float> GgufFile::GetFloat(std::string_view key) const {
  KVMEM_ASSIGN_OR_RETURN(const Value* v, Require(*this, key));
  std::optional<double> d = v->AsFloat();
  if (!d) return WrongType(key, *v, "float32 or float64");
  return static_cast<float>(*d);
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  KVMEM_ASSIGN_OR_RETURN(const Value* v, Require(*this, key));
  std::optional<bool> b = v->AsBool();
  if (!b) return WrongType(key, *v, "bool");
  return *b;
}

Result<std::string_view> GgufFile::GetString(std::string_view key) const {
  KVMEM_ASSIGN_OR_RETURN(const Value* v, Require(*this, key));
  std::optional<std::string_view> s = v->AsString();
  if (!s) return WrongType(key, *v, "string");
  return *s;
}

Result<const Array*> GgufFile::GetArray(std::string_view key) const {
  return RequireArray(*this, key, "array");
}

Result<std::span<const std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  constexpr std::string_view kExpected = "array of string";
  KVMEM_ASSIGN_OR_RETURN(const Array* a, RequireArray(*this, key, kExpected));
  if (a->elem_type() != ValueType::kString) return WrongType(key, *Find(key), kExpected);
  return a->strings();
}

Result<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  constexpr std::string_view kExpected = "array of float32 or float64";
  KVMEM_ASSIGN_OR_RETURN(const Array* a, RequireArray(*this, key, kExpected));
  if (!IsFloatType(a->elem_type())) return WrongType(key, *Find(key), kExpected);
  std::vector<float> out(a->size());
  if (a->elem_type() == ValueType::kFloat32) {
    if (!out.empty()) std::memcpy(out.data(), a->raw().data(), a->raw().size());
  } else {
    for (uint64_t i = 0; i < a->size(); ++i) out[i] = static_cast<float>(*a->at(i).AsFloat());
  }
  return out;
}

Result<std::vector<int32_t>> GgufFile::GetInt32Array(std::string_view key) const {
  constexpr std::string_view kExpected = "array of integers";
  KVMEM_ASSIGN_OR_RETURN(const Array* a, RequireArray(*this, key, kExpected));
  if (!IsIntegerType(a->elem_type())) return WrongType(key, *Find(key), kExpected);
  std::vector<int32_t> out(a->size());
  for (uint64_t i = 0; i < a->size(); ++i) {
    Value e = a->at(i);
    std::optional<int64_t> v = e.AsInt();
    if (!v || *v < std::numeric_limits<int32_t>::min() ||
        *v > std::numeric_limits<int32_t>::max()) {
      std::string shown = v ? std::to_string(*v) : std::to_string(*e.AsUint());
      return OutOfRange(Named(key) + ": element " + std::to_string(i) + " (" + shown +
                        ") does not fit int32");
    }
    out[i] = static_cast<int32_t>(*v);
  }
  return out;
}

Result<uint64_t> GgufFile::GetUintOr(std::string_view key, uint64_t fallback) const {
  return Has(key) ? GetUint(key) : fallback;
}
Result<int64_t> GgufFile::GetIntOr(std::string_view key, int64_t fallback) const {
  return Has(key) ? GetInt(key) : fallback;
}
Result<float> GgufFile::GetFloatOr(std::string_view key, float fallback) const {
  return Has(key) ? GetFloat(key) : fallback;
}
Result<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  return Has(key) ? GetBool(key) : fallback;
}
Result<std::string_view> GgufFile::GetStringOr(std::string_view key,
                                               std::string_view fallback) const {
  return Has(key) ? GetString(key) : fallback;
}

// ---- Typed-key forms.

std::string GgufFile::Name(Key key, std::string_view arch) const {
  return KeyName(key, arch.empty() ? architecture_ : arch);
}

Result<uint64_t> GgufFile::GetUint(Key key, std::string_view arch) const {
  return GetUint(Name(key, arch));
}
Result<int64_t> GgufFile::GetInt(Key key, std::string_view arch) const {
  return GetInt(Name(key, arch));
}
Result<float> GgufFile::GetFloat(Key key, std::string_view arch) const {
  return GetFloat(Name(key, arch));
}
Result<bool> GgufFile::GetBool(Key key, std::string_view arch) const {
  return GetBool(Name(key, arch));
}
Result<std::string_view> GgufFile::GetString(Key key, std::string_view arch) const {
  return GetString(Name(key, arch));
}
Result<const Array*> GgufFile::GetArray(Key key, std::string_view arch) const {
  return GetArray(Name(key, arch));
}
Result<std::span<const std::string_view>> GgufFile::GetStringArray(Key key,
                                                                   std::string_view arch) const {
  return GetStringArray(Name(key, arch));
}
Result<std::vector<float>> GgufFile::GetFloatArray(Key key, std::string_view arch) const {
  return GetFloatArray(Name(key, arch));
}
Result<std::vector<int32_t>> GgufFile::GetInt32Array(Key key, std::string_view arch) const {
  return GetInt32Array(Name(key, arch));
}
Result<uint64_t> GgufFile::GetUintOr(Key key, uint64_t fallback, std::string_view arch) const {
  return GetUintOr(Name(key, arch), fallback);
}
Result<int64_t> GgufFile::GetIntOr(Key key, int64_t fallback, std::string_view arch) const {
  return GetIntOr(Name(key, arch), fallback);
}
Result<float> GgufFile::GetFloatOr(Key key, float fallback, std::string_view arch) const {
  return GetFloatOr(Name(key, arch), fallback);
}
Result<bool> GgufFile::GetBoolOr(Key key, bool fallback, std::string_view arch) const {
  return GetBoolOr(Name(key, arch), fallback);
}
Result<std::string_view> GgufFile::GetStringOr(Key key, std::string_view fallback,
                                               std::string_view arch) const {
  return GetStringOr(Name(key, arch), fallback);
}

}  // namespace kvmem::gguf
