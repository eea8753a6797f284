// Test-only GGUF writer: builds valid files, and (through the raw hooks) deliberately broken
// ones, as bytes in memory. Not thread-safe; one builder per test.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "gguf/gguf_value.h"

namespace kvmem::gguf::testing {

// Little-endian primitives appended to a byte vector.
class ByteWriter {
 public:
  template <typename T>
  ByteWriter& Put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes_.insert(bytes_.end(), b, b + sizeof(T));
    return *this;
  }
  ByteWriter& U32(uint32_t v) { return Put(v); }
  ByteWriter& U64(uint64_t v) { return Put(v); }
  ByteWriter& I64(int64_t v) { return Put(v); }
  ByteWriter& Type(ValueType t) { return U32(static_cast<uint32_t>(t)); }
  ByteWriter& Str(std::string_view s) {
    U64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteWriter& Zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  size_t size() const { return bytes_.size(); }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> dims;  // written as n_dims = dims.size()
  uint32_t type = static_cast<uint32_t>(DType::kF32);
  std::optional<uint64_t> offset;  // default: after the previous tensor, aligned
};

// Byte i of tensor t's data, so tests can check that data pointers land on the right bytes.
inline uint8_t TensorByte(size_t t, uint64_t i) { return static_cast<uint8_t>(t * 37 + i * 7 + 1); }

inline uint64_t SpecBytes(const TensorSpec& t) {
  const DTypeInfo* info = GetDTypeInfo(t.type);
  if (info == nullptr || t.dims.empty()) return 0;
  // Bad shapes (zero, negative, huge) get no data: the reader must reject them before data.
  constexpr uint64_t kMaxTestBytes = 1 << 20;
  uint64_t n = 1;
  for (int64_t d : t.dims) {
    if (d <= 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return 0;
  }
  uint64_t bytes = n / info->block_size * info->type_size;
  return bytes <= kMaxTestBytes ? bytes : 0;
}

class GgufBuilder {
 public:
  using Body = std::function<void(ByteWriter&)>;

  GgufBuilder& Magic(uint32_t m) {
    magic_ = m;
    return *this;
  }
  GgufBuilder& Version(uint32_t v) {
    version_ = v;
    return *this;
  }
  GgufBuilder& KvCount(uint64_t n) {
    kv_count_ = n;
    return *this;
  }
  GgufBuilder& TensorCount(uint64_t n) {
    tensor_count_ = n;
    return *this;
  }

  // A key with a raw type id and a body that writes the value bytes.
  GgufBuilder& Kv(std::string key, uint32_t type, Body body) {
    kvs_.push_back({std::move(key), type, std::move(body)});
    return *this;
  }
  template <typename T>
  GgufBuilder& Scalar(std::string key, ValueType t, T v) {
    return Kv(std::move(key), static_cast<uint32_t>(t), [v](ByteWriter& w) { w.Put(v); });
  }
  GgufBuilder& String(std::string key, std::string v) {
    return Kv(std::move(key), static_cast<uint32_t>(ValueType::kString),
              [v](ByteWriter& w) { w.Str(v); });
  }
  template <typename T>
  GgufBuilder& ScalarArray(std::string key, ValueType t, std::vector<T> v) {
    return Kv(std::move(key), static_cast<uint32_t>(ValueType::kArray), [t, v](ByteWriter& w) {
      w.Type(t).U64(v.size());
      for (const T& e : v) w.Put(e);
    });
  }
  GgufBuilder& StringArray(std::string key, std::vector<std::string> v) {
    return Kv(std::move(key), static_cast<uint32_t>(ValueType::kArray), [v](ByteWriter& w) {
      w.Type(ValueType::kString).U64(v.size());
      for (const std::string& e : v) w.Str(e);
    });
  }
  // general.alignment (uint32) and the layout of tensor data.
  GgufBuilder& Alignment(uint32_t a) {
    alignment_ = a;
    return Scalar("general.alignment", ValueType::kUint32, a);
  }
  GgufBuilder& Tensor(std::string name, std::vector<int64_t> dims, uint32_t type,
                      std::optional<uint64_t> offset = std::nullopt) {
    tensors_.push_back({std::move(name), std::move(dims), type, offset});
    return *this;
  }

  // Tensor data is packed in order, each start aligned; nothing follows the last tensor, so
  // dropping any trailing byte makes the file invalid.
  std::vector<uint8_t> Build() const {
    ByteWriter w;
    w.U32(magic_).U32(version_);
    w.U64(tensor_count_.value_or(tensors_.size()));
    w.U64(kv_count_.value_or(kvs_.size()));
    for (const KvSpec& kv : kvs_) {
      w.Str(kv.key).U32(kv.type);
      kv.body(w);
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const TensorSpec& t : tensors_) {
      uint64_t off = t.offset.value_or((next + alignment_ - 1) / alignment_ * alignment_);
      offsets.push_back(off);
      next = off + SpecBytes(t);
      w.Str(t.name).U32(static_cast<uint32_t>(t.dims.size()));
      for (int64_t d : t.dims) w.I64(d);
      w.U32(t.type).U64(off);
    }
    if (tensors_.empty()) return std::move(w.bytes());
    w.Zeros((alignment_ - w.size() % alignment_) % alignment_);
    size_t data_start = w.size();
    // Tensors placed absurdly far (tests of bad offsets) get no data.
    constexpr uint64_t kMaxTestOffset = 1 << 20;
    uint64_t data_size = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (offsets[i] > kMaxTestOffset) continue;
      data_size = std::max(data_size, offsets[i] + SpecBytes(tensors_[i]));
    }
    w.Zeros(data_size);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (offsets[i] > kMaxTestOffset) continue;
      for (uint64_t j = 0; j < SpecBytes(tensors_[i]); ++j) {
        w.bytes()[data_start + offsets[i] + j] = TensorByte(i, j);
      }
    }
    return std::move(w.bytes());
  }

 private:
  struct KvSpec {
    std::string key;
    uint32_t type;
    Body body;
  };
  uint32_t magic_ = 0x46554747;
  uint32_t version_ = 3;
  std::optional<uint64_t> kv_count_;
  std::optional<uint64_t> tensor_count_;
  uint64_t alignment_ = 32;
  std::vector<KvSpec> kvs_;
  std::vector<TensorSpec> tensors_;
};

}  // namespace kvmem::gguf::testing
