#include "memory/store/safetensors.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/checked_math.h"
#include "memory/store/json_util.h"
#include "core/utf8.h"

namespace kvmem::memory::store {
namespace {

using json = Json;

struct DTypeEntry {
  StDType type;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    // in StDType order
    {StDType::kBool, "BOOL", 1},      {StDType::kU8, "U8", 1},          {StDType::kI8, "I8", 1},
    {StDType::kF8E5M2, "F8_E5M2", 1}, {StDType::kF8E4M3, "F8_E4M3", 1}, {StDType::kI16, "I16", 2},
    {StDType::kU16, "U16", 2},        {StDType::kF16, "F16", 2},        {StDType::kBF16, "BF16", 2},
    {StDType::kI32, "I32", 4},        {StDType::kU32, "U32", 4},        {StDType::kF32, "F32", 4},
    {StDType::kF64, "F64", 8},        {StDType::kI64, "I64", 8},        {StDType::kU64, "U64", 8},
};

constexpr uint64_t kLenBytes = 8;
// Valid headers nest 3 deep ({tensor: {shape: [..]}}); anything much deeper is refused before
// the JSON parser builds it.
constexpr int kMaxDepth = 8;

std::string Str(uint64_t v) { return std::to_string(v); }

struct Entry {
  StTensor tensor;
  uint64_t begin = 0, end = 0;
};

Result<Entry> ParseTensorEntry(const std::string& name, const json& j, uint64_t buffer_bytes) {
  const std::string what = "tensor " + Quoted(name);
  if (!j.is_object()) return Corrupt(what + ": entry is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
      return Corrupt(what + ": unknown field " + Quoted(it.key()));
    }
  }
  Entry e;
  e.tensor.name = name;
  auto dtype = j.find("dtype");
  if (dtype == j.end() || !dtype->is_string())
    return Corrupt(what + ": 'dtype' missing or not a string");
  Result<StDType> t = ParseStDType(dtype->get_ref<const std::string&>());
  if (!t.ok()) return t.status().WithContext(what);
  e.tensor.dtype = *t;

  auto shape = j.find("shape");
  if (shape == j.end() || !shape->is_array())
    return Corrupt(what + ": 'shape' missing or not an array");
  uint64_t elems = 1;
  for (const json& d : *shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Corrupt(what + ": 'shape' entry " + Quoted(d.dump()) +
                     " is not a non-negative integer");
    }
    e.tensor.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    if (!CheckedMul(elems, d.get<uint64_t>(), &elems))
      return Corrupt(what + ": 'shape' element count overflows");
  }
  uint64_t nbytes = 0;
  if (!CheckedMul(elems, StDTypeSize(e.tensor.dtype), &nbytes)) {
    return Corrupt(what + ": 'shape' byte size overflows");
  }

  auto off = j.find("data_offsets");
  if (off == j.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return Corrupt(what + ": 'data_offsets' must be two non-negative integers");
  }
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end) {
    return Corrupt(what + ": 'data_offsets' begin " + Str(e.begin) + " > end " + Str(e.end));
  }
  if (e.end > buffer_bytes) {
    return Corrupt(what + ": 'data_offsets' end " + Str(e.end) + " past the data buffer (" +
                   Str(buffer_bytes) + " bytes; truncated file?)");
  }
  if (e.end - e.begin != nbytes) {
    return Corrupt(what + ": 'data_offsets' span " + Str(e.end - e.begin) + " bytes != 'shape' x " +
                   "'dtype' size " + Str(nbytes));
  }
  return e;
}

}  // namespace

const char* StDTypeName(StDType t) { return kDTypes[static_cast<int>(t)].name; }
size_t StDTypeSize(StDType t) { return kDTypes[static_cast<int>(t)].size; }

Result<StDType> ParseStDType(std::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (name == e.name) return e.type;
  }
  return Unsupported("unknown safetensors dtype " + Quoted(name));
}

const StTensor* SafetensorsView::Find(std::string_view name) const {
  for (const StTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const std::string* SafetensorsView::FindMetadata(std::string_view key) const {
  auto it = metadata.find(std::string(key));
  return it == metadata.end() ? nullptr : &it->second;
}

Result<uint64_t> SafetensorsPrefixBytes(std::span<const uint8_t> first, uint64_t file_size,
                                        uint64_t max_header_bytes) {
  if (file_size < kLenBytes || first.size() < kLenBytes) {
    return Corrupt("safetensors: file of " + Str(file_size) +
                   " bytes is shorter than the 8-byte header length");
  }
  uint8_t len_bytes[kLenBytes];
  std::memcpy(len_bytes, first.data(), kLenBytes);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | len_bytes[i];
  if (header_len > max_header_bytes) {
    return Corrupt("safetensors: header length " + Str(header_len) + " exceeds the limit of " +
                   Str(max_header_bytes) + " bytes");
  }
  if (header_len > file_size - kLenBytes) {
    return Corrupt("safetensors: header length " + Str(header_len) + " runs past the end of the " +
                   Str(file_size) + "-byte file (truncated?)");
  }
  return kLenBytes + header_len;
}

Result<SafetensorsView> ParseSafetensorsHeader(std::span<const uint8_t> prefix, uint64_t file_size,
                                               uint64_t max_header_bytes) {
  KVMEM_ASSIGN_OR_RETURN(const uint64_t prefix_bytes,
                         SafetensorsPrefixBytes(prefix, file_size, max_header_bytes));
  if (prefix.size() != prefix_bytes) {
    return InvalidArgument("safetensors: " + Str(prefix.size()) + " bytes given for a " +
                           Str(prefix_bytes) + "-byte length and header");
  }
  const uint64_t header_len = prefix_bytes - kLenBytes;
  const std::string_view header(reinterpret_cast<const char*>(prefix.data() + kLenBytes),
                                header_len);
  if (header.empty() || header[0] != '{') {
    return Corrupt("safetensors: header does not start with '{'");
  }
  KVMEM_ASSIGN_OR_RETURN(const json root,
                         ParseUntrustedJson(header, kMaxDepth, "safetensors header"));
  if (!root.is_object()) return Corrupt("safetensors: header is not a JSON object");

  const uint64_t buffer_bytes = file_size - prefix_bytes;
  SafetensorsView view;
  std::vector<Entry> entries;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Corrupt("safetensors: '__metadata__' is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return Corrupt("safetensors: '__metadata__' value of " + Quoted(m.key()) +
                         " is not a string");
        }
        view.metadata.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    KVMEM_ASSIGN_OR_RETURN(Entry e, ParseTensorEntry(it.key(), *it, buffer_bytes));
    entries.push_back(std::move(e));
  }

  // Sorted by offsets, the tensors must tile [0, buffer_bytes) exactly.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (Entry& e : entries) {
    if (e.begin != at) {
      return Corrupt("safetensors: tensor " + Quoted(e.tensor.name) + " 'data_offsets' begin " +
                     Str(e.begin) +
                     (e.begin < at ? " overlaps the previous tensor" : " leaves a gap") +
                     " (expected " + Str(at) + ")");
    }
    at = e.end;
    e.tensor.offset = prefix_bytes + e.begin;
    e.tensor.bytes = e.end - e.begin;
    view.tensors.push_back(std::move(e.tensor));
  }
  if (at != buffer_bytes) {
    return Corrupt("safetensors: tensors cover " + Str(at) + " bytes of a " + Str(buffer_bytes) +
                   "-byte data buffer (trailing bytes or truncated header)");
  }
  return view;
}

Result<SafetensorsView> ParseSafetensors(std::span<const uint8_t> file, uint64_t max_header_bytes) {
  KVMEM_ASSIGN_OR_RETURN(const uint64_t prefix_bytes,
                         SafetensorsPrefixBytes(file, file.size(), max_header_bytes));
  KVMEM_ASSIGN_OR_RETURN(
      SafetensorsView view,
      ParseSafetensorsHeader(file.first(prefix_bytes), file.size(), max_header_bytes));
  for (StTensor& t : view.tensors) t.data = file.subspan(t.offset, t.bytes);
  return view;
}

Status SafetensorsWriter::AddMetadata(std::string key, std::string value) {
  if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
    return InvalidArgument("safetensors metadata " + Quoted(key) + ": not valid UTF-8");
  }
  metadata_.emplace_back(std::move(key), std::move(value));
  return Status::Ok();
}

Status SafetensorsWriter::AddTensor(std::string name, StDType dtype, std::vector<int64_t> shape,
                                    std::span<const uint8_t> data) {
  if (name.empty() || name == "__metadata__" || !IsValidUtf8(name)) {
    return InvalidArgument("safetensors tensor name " + Quoted(name) + " is not allowed");
  }
  for (const StTensor& t : tensors_) {
    if (t.name == name)
      return InvalidArgument("safetensors tensor " + Quoted(name) + " added twice");
  }
  uint64_t n = StDTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0 || !CheckedMul(n, static_cast<uint64_t>(d), &n)) {
      return InvalidArgument("safetensors tensor " + Quoted(name) + ": bad shape");
    }
  }
  if (n != data.size()) {
    return InvalidArgument("safetensors tensor " + Quoted(name) + ": " + Str(data.size()) +
                           " bytes given, shape needs " + Str(n));
  }
  tensors_.push_back({std::move(name), dtype, std::move(shape), data});
  return Status::Ok();
}

std::string SafetensorsWriter::Header() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) meta[k] = v;
    j["__metadata__"] = std::move(meta);
  }
  uint64_t at = 0;
  for (const StTensor& t : tensors_) {
    j[t.name] = {{"dtype", StDTypeName(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {at, at + t.data.size()}}};
    at += t.data.size();
  }
  std::string body = j.dump();
  body.append((kLenBytes - body.size() % kLenBytes) % kLenBytes, ' ');
  std::string out(kLenBytes, '\0');
  for (size_t i = 0; i < kLenBytes; ++i)
    out[i] = static_cast<char>((body.size() >> (8 * i)) & 0xff);
  return out + body;
}

std::vector<std::span<const uint8_t>> SafetensorsWriter::Pieces(const std::string& header) const {
  std::vector<std::span<const uint8_t>> pieces;
  pieces.emplace_back(reinterpret_cast<const uint8_t*>(header.data()), header.size());
  for (const StTensor& t : tensors_) pieces.push_back(t.data);
  return pieces;
}

std::vector<uint8_t> SafetensorsWriter::ToBytes() const {
  const std::string header = Header();
  std::vector<uint8_t> out;
  for (std::span<const uint8_t> p : Pieces(header)) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace kvmem::memory::store
