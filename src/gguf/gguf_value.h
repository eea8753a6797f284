// GGUF metadata values: the on-disk value types and read-only views of parsed values. A Value or
// Array points into the bytes of the GgufFile it came from and is valid as long as that file
// object lives. Thread-safe for concurrent reads (immutable after parsing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvmem::gguf {

// On-disk ids (gguf_type in ggml/gguf.h).
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr uint32_t kNumValueTypes = 13;

// "uint8", "string", "array", ...; "unknown" for ids >= kNumValueTypes.
const char* ValueTypeName(ValueType t);
// Bytes of one value of a fixed-size type; 0 for kString and kArray (and unknown ids).
size_t ValueTypeSize(ValueType t);
bool IsIntegerType(ValueType t);
bool IsFloatType(ValueType t);

class Array;

// One metadata value (a scalar, a string, or an array). Cheap to copy; a view.
class Value {
 public:
  Value() = default;
  // `bytes` holds ValueTypeSize(t) little-endian bytes of a fixed-size type `t`.
  static Value Scalar(ValueType t, const uint8_t* bytes);
  static Value String(std::string_view s);
  static Value OfArray(const Array* array);

  ValueType type() const { return type_; }
  // Each returns nullopt when the type does not match or the value does not fit:
  std::optional<uint64_t> AsUint() const;  // any integer type holding a value >= 0
  std::optional<int64_t> AsInt() const;    // any integer type holding a value that fits int64
  std::optional<double> AsFloat() const;   // float32 or float64
  std::optional<bool> AsBool() const;
  std::optional<std::string_view> AsString() const;
  const Array* AsArray() const { return type_ == ValueType::kArray ? array_ : nullptr; }

  // "uint32", "string", "array of string", "array of array of uint8".
  std::string TypeName() const;

 private:
  ValueType type_ = ValueType::kUint8;
  const uint8_t* bytes_ = nullptr;  // scalar or string bytes
  size_t size_ = 0;                 // string length
  const Array* array_ = nullptr;
};

// A homogeneous array of values. Fixed-size elements stay packed in the file's bytes (not
// necessarily aligned); strings and nested arrays are indexed at parse time.
class Array {
 public:
  // `count` packed elements of fixed-size type `t` starting at `raw`.
  static Array Fixed(ValueType t, uint64_t count, const uint8_t* raw);
  static Array Strings(std::vector<std::string_view> strings);
  static Array Nested(std::vector<Array> arrays);

  ValueType elem_type() const { return elem_type_; }
  uint64_t size() const { return size_; }
  // Element i (i < size()).
  Value at(uint64_t i) const;
  // The elements of a string array; empty for other element types.
  std::span<const std::string_view> strings() const { return strings_; }
  // The packed little-endian elements of a fixed-size array; empty otherwise.
  std::span<const uint8_t> raw() const;

  // "string", "array of uint8", ...
  std::string ElemTypeName() const;

 private:
  ValueType elem_type_ = ValueType::kUint8;
  uint64_t size_ = 0;
  const uint8_t* raw_ = nullptr;
  std::vector<std::string_view> strings_;
  std::vector<Array> nested_;
};

}  // namespace kvmem::gguf
