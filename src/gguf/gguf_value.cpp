#include "gguf/gguf_value.h"

#include <array>
#include <bit>
#include <cassert>
#include <cstring>
#include <limits>
#include <utility>

namespace kvmem::gguf {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF values are read in place; a big-endian host needs byte swaps here");

struct TypeEntry {
  const char* name;
  size_t size;  // 0: variable-size
};

constexpr std::array<TypeEntry, kNumValueTypes> kTypes = {{
    {"uint8", 1},
    {"int8", 1},
    {"uint16", 2},
    {"int16", 2},
    {"uint32", 4},
    {"int32", 4},
    {"float32", 4},
    {"bool", 1},
    {"string", 0},
    {"array", 0},
    {"uint64", 8},
    {"int64", 8},
    {"float64", 8},
}};

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool IsSigned(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}

// Signed integer types widened to int64.
int64_t LoadSigned(ValueType t, const uint8_t* p) {
  switch (t) {
    case ValueType::kInt8:
      return Load<int8_t>(p);
    case ValueType::kInt16:
      return Load<int16_t>(p);
    case ValueType::kInt32:
      return Load<int32_t>(p);
    default:
      return Load<int64_t>(p);
  }
}

// Unsigned integer types widened to uint64.
uint64_t LoadUnsigned(ValueType t, const uint8_t* p) {
  switch (t) {
    case ValueType::kUint8:
      return Load<uint8_t>(p);
    case ValueType::kUint16:
      return Load<uint16_t>(p);
    case ValueType::kUint32:
      return Load<uint32_t>(p);
    default:
      return Load<uint64_t>(p);
  }
}

}  // namespace

const char* ValueTypeName(ValueType t) {
  auto i = static_cast<uint32_t>(t);
  return i < kNumValueTypes ? kTypes[i].name : "unknown";
}

size_t ValueTypeSize(ValueType t) {
  auto i = static_cast<uint32_t>(t);
  return i < kNumValueTypes ? kTypes[i].size : 0;
}

bool IsIntegerType(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool IsFloatType(ValueType t) { return t == ValueType::kFloat32 || t == ValueType::kFloat64; }

Value Value::Scalar(ValueType t, const uint8_t* bytes) {
  assert(ValueTypeSize(t) > 0);
  Value v;
  v.type_ = t;
  v.bytes_ = bytes;
  return v;
}

Value Value::String(std::string_view s) {
  Value v;
  v.type_ = ValueType::kString;
  v.bytes_ = reinterpret_cast<const uint8_t*>(s.data());
  v.size_ = s.size();
  return v;
}

Value Value::OfArray(const Array* array) {
  Value v;
  v.type_ = ValueType::kArray;
  v.array_ = array;
  return v;
}

std::optional<uint64_t> Value::AsUint() const {
  if (!IsIntegerType(type_)) return std::nullopt;
  if (!IsSigned(type_)) return LoadUnsigned(type_, bytes_);
  int64_t s = LoadSigned(type_, bytes_);
  if (s < 0) return std::nullopt;
  return static_cast<uint64_t>(s);
}

std::optional<int64_t> Value::AsInt() const {
  if (!IsIntegerType(type_)) return std::nullopt;
  if (IsSigned(type_)) return LoadSigned(type_, bytes_);
  uint64_t u = LoadUnsigned(type_, bytes_);
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(u);
}

std::optional<double> Value::AsFloat() const {
  if (type_ == ValueType::kFloat32) return Load<float>(bytes_);
  if (type_ == ValueType::kFloat64) return Load<double>(bytes_);
  return std::nullopt;
}

std::optional<bool> Value::AsBool() const {
  // Read as a byte: a stored 2 must not become an invalid bool object.
  if (type_ == ValueType::kBool) return bytes_[0] != 0;
  return std::nullopt;
}

std::optional<std::string_view> Value::AsString() const {
  if (type_ != ValueType::kString) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(bytes_), size_);
}

std::string Value::TypeName() const {
  if (type_ == ValueType::kArray) return "array of " + array_->ElemTypeName();
  return ValueTypeName(type_);
}

Array Array::Fixed(ValueType t, uint64_t count, const uint8_t* raw) {
  assert(ValueTypeSize(t) > 0);
  Array a;
  a.elem_type_ = t;
  a.size_ = count;
  a.raw_ = raw;
  return a;
}

Array Array::Strings(std::vector<std::string_view> strings) {
  Array a;
  a.elem_type_ = ValueType::kString;
  a.size_ = strings.size();
  a.strings_ = std::move(strings);
  return a;
}

Array Array::Nested(std::vector<Array> arrays) {
  Array a;
  a.elem_type_ = ValueType::kArray;
  a.size_ = arrays.size();
  a.nested_ = std::move(arrays);
  return a;
}

Value Array::at(uint64_t i) const {
  assert(i < size_);
  if (elem_type_ == ValueType::kString) return Value::String(strings_[i]);
  if (elem_type_ == ValueType::kArray) return Value::OfArray(&nested_[i]);
  return Value::Scalar(elem_type_, raw_ + i * ValueTypeSize(elem_type_));
}

std::span<const uint8_t> Array::raw() const {
  if (raw_ == nullptr) return {};
  return {raw_, static_cast<size_t>(size_ * ValueTypeSize(elem_type_))};
}

std::string Array::ElemTypeName() const {
  if (elem_type_ != ValueType::kArray) return ValueTypeName(elem_type_);
  // An empty nested array records no inner element type.
  if (nested_.empty()) return "array";
  return "array of " + nested_[0].ElemTypeName();
}

}  // namespace kvmem::gguf
