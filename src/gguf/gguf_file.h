// Reader for GGUF model files (versions 2 and 3, little-endian): the metadata key/value table,
// the tensor table, and views of tensor data in place. The file is untrusted: parsing checks
// every count, length, offset and size against the bytes present and fails with a Status naming
// the bad field; after a successful parse every TensorInfo::data range lies inside the file.
//
// Thread-safe for concurrent reads once constructed (nothing mutates after parsing). Values,
// string views and tensor data pointers borrow the file's bytes: they stay valid while the
// GgufFile lives (and, for Parse(), while the caller's bytes do). Moving a GgufFile keeps them
// valid.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "gguf/gguf_keys.h"
#include "gguf/gguf_value.h"

namespace kvmem::gguf {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;
inline constexpr int kMaxArrayDepth = 4;  // an array of arrays is depth 2

struct TensorInfo {
  std::string name;
  int n_dims = 0;
  int64_t dims[kMaxDims] = {1, 1, 1, 1};  // ggml order (ne): dims[0] is the contiguous row
                                          // length; dims past n_dims are 1
  DType type = DType::kF32;
  uint64_t offset = 0;  // relative to the data section; a multiple of the alignment
  uint64_t n_bytes = 0;
  int64_t n_elements = 0;
  const uint8_t* data = nullptr;  // n_bytes bytes inside the file

  int64_t rows() const { return n_elements / dims[0]; }
};

struct KeyValue {
  std::string_view key;
  Value value;
};

class GgufFile {
 public:
  // Maps the file and parses it; the mapping is owned by the returned object.
  static Result<GgufFile> Open(const std::string& path);
  // Parses bytes the caller keeps alive for the lifetime of the returned object.
  static Result<GgufFile> Parse(std::span<const uint8_t> bytes);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  // general.architecture, or "" when the file has none.
  std::string_view architecture() const { return architecture_; }
  uint64_t alignment() const { return alignment_; }
  // File offset where the tensor data section starts (a multiple of alignment()); may lie past
  // the end of a file that has no tensors.
  uint64_t data_offset() const { return data_offset_; }
  std::span<const uint8_t> bytes() const { return bytes_; }
  // MappedFile::DropPages on the file's mapping (nothing for Parse()d buffers).
  void DropPages(const void* p, size_t n) const { mapped_.DropPages(p, n); }

  // ---- Metadata. All keys in file order.
  std::span<const KeyValue> metadata() const { return metadata_; }
  // nullptr when absent.
  const Value* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters. Missing key: NotFound naming the key. Wrong type: Corrupt naming the key,
  // its type and the expected type. Value out of range for the result: OutOfRange.
  Result<uint64_t> GetUint(std::string_view key) const;  // any integer type, value >= 0
  Result<int64_t> GetInt(std::string_view key) const;    // any integer type
  Result<float> GetFloat(std::string_view key) const;    // float32 or float64
  Result<bool> GetBool(std::string_view key) const;
  Result<std::string_view> GetString(std::string_view key) const;
  Result<const Array*> GetArray(std::string_view key) const;
  Result<std::span<const std::string_view>> GetStringArray(std::string_view key) const;
  Result<std::vector<float>> GetFloatArray(std::string_view key) const;    // float32/64 elements
  Result<std::vector<int32_t>> GetInt32Array(std::string_view key) const;  // integer elements

  // Optional variants: `fallback` when the key is absent; a present key of the wrong type is
  // still an error.
  Result<uint64_t> GetUintOr(std::string_view key, uint64_t fallback) const;
  Result<int64_t> GetIntOr(std::string_view key, int64_t fallback) const;
  Result<float> GetFloatOr(std::string_view key, float fallback) const;
  Result<bool> GetBoolOr(std::string_view key, bool fallback) const;
  Result<std::string_view> GetStringOr(std::string_view key, std::string_view fallback) const;

  // The same, by typed key. `arch` fills "{arch}" in arch-prefixed keys; empty means this
  // file's architecture().
  std::string Name(Key key, std::string_view arch = {}) const;
  bool Has(Key key, std::string_view arch = {}) const { return Has(Name(key, arch)); }
  Result<uint64_t> GetUint(Key key, std::string_view arch = {}) const;
  Result<int64_t> GetInt(Key key, std::string_view arch = {}) const;
  Result<float> GetFloat(Key key, std::string_view arch = {}) const;
  Result<bool> GetBool(Key key, std::string_view arch = {}) const;
  Result<std::string_view> GetString(Key key, std::string_view arch = {}) const;
  Result<const Array*> GetArray(Key key, std::string_view arch = {}) const;
  Result<std::span<const std::string_view>> GetStringArray(Key key,
                                                           std::string_view arch = {}) const;
  Result<std::vector<float>> GetFloatArray(Key key, std::string_view arch = {}) const;
  Result<std::vector<int32_t>> GetInt32Array(Key key, std::string_view arch = {}) const;
  Result<uint64_t> GetUintOr(Key key, uint64_t fallback, std::string_view arch = {}) const;
  Result<int64_t> GetIntOr(Key key, int64_t fallback, std::string_view arch = {}) const;
  Result<float> GetFloatOr(Key key, float fallback, std::string_view arch = {}) const;
  Result<bool> GetBoolOr(Key key, bool fallback, std::string_view arch = {}) const;
  Result<std::string_view> GetStringOr(Key key, std::string_view fallback,
                                       std::string_view arch = {}) const;

  // ---- Tensors, in file order.
  std::span<const TensorInfo> tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorInfo* FindTensor(std::string_view name) const;
  // NotFound naming the tensor when absent.
  Result<const TensorInfo*> GetTensor(std::string_view name) const;

 private:
  class Parser;
  GgufFile() = default;

  MappedFile mapped_;  // empty for Parse()
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  std::string_view architecture_;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> metadata_;
  std::vector<std::unique_ptr<Array>> arrays_;              // owners of top-level array values
  std::unordered_map<std::string_view, size_t> key_index_;  // keys view the file bytes
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;  // names view the file bytes
};

}  // namespace kvmem::gguf
