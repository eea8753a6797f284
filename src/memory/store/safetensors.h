// safetensors files (huggingface/safetensors), the on-disk form of KV blocks (DESIGN.md
// "Persistence format"), so Python's `safetensors` opens what kvmem writes:
//
//   u64 little-endian N | N bytes of JSON header (UTF-8, may end in spaces) | byte buffer
//   header: {"__metadata__": {"key": "value", ...},
//            "<tensor>": {"dtype": "F16", "shape": [d0, d1, ...], "data_offsets": [b, e]}, ...}
//
// Offsets are relative to the byte buffer; tensors are row-major little-endian and together
// cover the buffer exactly, without gaps or overlap (the spec's rule, enforced by the Rust
// reader). The parser treats its input as hostile: every size is bounded and overflow-checked
// and every violation is a Corrupt (or Unsupported for an unknown dtype) naming the field.
// Thread-safe: pure functions; a SafetensorsView borrows the bytes it was parsed from, a
// SafetensorsWriter borrows the tensor bytes added to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvmem::memory::store {

enum class StDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64
};
const char* StDTypeName(StDType t);  // "F16", "U8", ... as in the header
size_t StDTypeSize(StDType t);       // bytes per element
// Unsupported naming the dtype for anything else (including the sub-byte F4/F6 types).
Result<StDType> ParseStDType(std::string_view name);

struct StTensor {
  std::string name;
  StDType dtype = StDType::kU8;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;  // unaligned; empty from ParseSafetensorsHeader
  uint64_t offset = 0;            // of the data in the file (parsed tensors)
  uint64_t bytes = 0;             // product(shape) * StDTypeSize(dtype) (parsed tensors)
};

struct SafetensorsView {
  std::map<std::string, std::string> metadata;
  std::vector<StTensor> tensors;  // in data order
  // nullptr if absent.
  const StTensor* Find(std::string_view name) const;
  const std::string* FindMetadata(std::string_view key) const;
};

// The Rust reader's limit; callers that know their headers are small pass less.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

Result<SafetensorsView> ParseSafetensors(std::span<const uint8_t> file,
                                         uint64_t max_header_bytes = kMaxSafetensorsHeaderBytes);

// The same checks from the header alone, for a reader that reads each tensor's bytes where
// they belong: SafetensorsPrefixBytes says from the file's first 8 bytes how many bytes the
// length and header take (8 + N), and ParseSafetensorsHeader parses exactly those bytes of a
// file of file_size bytes. Its tensors carry offsets, not data.
Result<uint64_t> SafetensorsPrefixBytes(std::span<const uint8_t> first, uint64_t file_size,
                                        uint64_t max_header_bytes = kMaxSafetensorsHeaderBytes);
Result<SafetensorsView> ParseSafetensorsHeader(
    std::span<const uint8_t> prefix, uint64_t file_size,
    uint64_t max_header_bytes = kMaxSafetensorsHeaderBytes);

// Builds a file: metadata and tensors in the order added (deterministic bytes, so files can be
// content-addressed). The header is padded with spaces to a multiple of 8 bytes, as the Rust
// writer does, so the data starts 8-aligned.
class SafetensorsWriter {
 public:
  // Keys and values must be valid UTF-8 (they become JSON strings).
  Status AddMetadata(std::string key, std::string value);
  // data is borrowed until the writer is done with; its size must equal the shape's.
  Status AddTensor(std::string name, StDType dtype, std::vector<int64_t> shape,
                   std::span<const uint8_t> data);

  // The 8-byte length and the padded JSON header.
  std::string Header() const;
  // Header() followed by every tensor's bytes: the whole file as pieces, without copying data.
  // The first piece is `header` (from Header(); it must outlive the pieces).
  std::vector<std::span<const uint8_t>> Pieces(const std::string& header) const;
  std::vector<uint8_t> ToBytes() const;

 private:
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<StTensor> tensors_;
};

}  // namespace kvmem::memory::store
