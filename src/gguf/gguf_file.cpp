// GGUF parsing: header, metadata, tensor table, data placement. Typed metadata getters live in
// gguf_metadata.cpp.
#include "gguf/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "core/checked_math.h"
#include "core/utf8.h"  // Quoted: names come from the file, messages stay printable

namespace kvmem::gguf {
namespace {

// Smallest encodings, used to reject counts the remaining bytes cannot possibly hold before
// anything is allocated for them.
constexpr uint64_t kStringLenBytes = 8;
constexpr uint64_t kMinKvBytes = kStringLenBytes + 1 + 4 + 1;  // 1-char key, type, uint8 value
constexpr uint64_t kMinTensorInfoBytes = kStringLenBytes + 4 + 8 + 4 + 8;  // one dim
constexpr uint64_t kMinNestedArrayBytes = 4 + 8;                           // type + count

std::string Str(uint64_t v) { return std::to_string(v); }

// A bounds-checked little-endian reader over the file bytes. Every read names what it reads.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return bytes_.size() - offset_; }

  Result<const uint8_t*> Take(uint64_t n, std::string_view what) {
    if (n > remaining()) {
      return Corrupt(std::string(what) + " at offset " + Str(offset_) + " needs " + Str(n) +
                     " bytes but only " + Str(remaining()) + " remain (truncated file?)");
    }
    const uint8_t* p = bytes_.data() + offset_;
    offset_ += n;
    return p;
  }

  template <typename T>
  Result<T> Read(std::string_view what) {
    KVMEM_ASSIGN_OR_RETURN(const uint8_t* p, Take(sizeof(T), what));
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }

  // A uint64 length followed by that many bytes.
  Result<std::string_view> ReadString(std::string_view what) {
    KVMEM_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    if (len > remaining()) {
      return Corrupt(std::string(what) + " " + Str(len) + " at offset " +
                     Str(offset_ - kStringLenBytes) + " runs past end of file (" +
                     Str(remaining()) + " bytes left)");
    }
    KVMEM_ASSIGN_OR_RETURN(const uint8_t* p, Take(len, what));
    return std::string_view(reinterpret_cast<const char*>(p), len);
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t offset_ = 0;
};

}  // namespace

class GgufFile::Parser {
 public:
  explicit Parser(GgufFile* f) : f_(f), cur_(f->bytes_) {}

  Status Run() {
    uint64_t n_tensors = 0, n_kv = 0;
    KVMEM_RETURN_IF_ERROR(ReadHeader(&n_tensors, &n_kv));
    KVMEM_RETURN_IF_ERROR(ReadMetadata(n_kv));
    KVMEM_RETURN_IF_ERROR(ApplyGeneralKeys());
    KVMEM_RETURN_IF_ERROR(ReadTensorInfos(n_tensors));
    return PlaceTensors();
  }

 private:
  Status ReadHeader(uint64_t* n_tensors, uint64_t* n_kv) {
    KVMEM_ASSIGN_OR_RETURN(uint32_t magic, cur_.Read<uint32_t>("magic"));
    if (magic != kGgufMagic) {
      std::string_view got(reinterpret_cast<const char*>(f_->bytes_.data()), 4);
      return Corrupt("bad magic " + Quoted(got) + ", expected 'GGUF'");
    }
    KVMEM_ASSIGN_OR_RETURN(uint32_t version, cur_.Read<uint32_t>("version"));
    if (version != 2 && version != 3) {
      std::string msg = "GGUF version " + Str(version) + " is not supported (only 2 and 3)";
      uint32_t swapped = __builtin_bswap32(version);
      if (swapped == 2 || swapped == 3) msg += "; the file looks big-endian";
      return Unsupported(msg);
    }
    f_->version_ = version;
    KVMEM_ASSIGN_OR_RETURN(*n_tensors, cur_.Read<uint64_t>("tensor count"));
    KVMEM_ASSIGN_OR_RETURN(*n_kv, cur_.Read<uint64_t>("metadata count"));
    uint64_t left = cur_.remaining();
    if (*n_kv > left / kMinKvBytes) {
      return Corrupt("metadata count " + Str(*n_kv) + " cannot fit in the " + Str(left) +
                     " bytes after the header");
    }
    left -= *n_kv * kMinKvBytes;
    if (*n_tensors > left / kMinTensorInfoBytes) {
      return Corrupt("tensor count " + Str(*n_tensors) + " cannot fit in the " +
                     Str(cur_.remaining()) + " bytes after the header");
    }
    return Status::Ok();
  }

  Result<ValueType> ReadType(std::string_view what) {
    KVMEM_ASSIGN_OR_RETURN(uint32_t id, cur_.Read<uint32_t>(what));
    if (id >= kNumValueTypes) {
      return Corrupt("unknown " + std::string(what) + " " + Str(id) + " at offset " +
                     Str(cur_.offset() - 4));
    }
    return static_cast<ValueType>(id);
  }

  static Status CheckBools(const uint8_t* p, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      if (p[i] > 1) {
        return Corrupt("bool element " + Str(i) + " is " + Str(p[i]) + ", expected 0 or 1");
      }
    }
    return Status::Ok();
  }

  // Element type, count and elements of an array at nesting `depth` (1 = a top-level value).
  Result<Array> ReadArray(int depth) {
    if (depth > kMaxArrayDepth) {
      return Corrupt("arrays nested deeper than " + Str(kMaxArrayDepth) + " levels");
    }
    KVMEM_ASSIGN_OR_RETURN(ValueType type, ReadType("array element type"));
    KVMEM_ASSIGN_OR_RETURN(uint64_t count, cur_.Read<uint64_t>("array count"));
    uint64_t elem_size = ValueTypeSize(type);
    uint64_t min_size = elem_size
                            ? elem_size
                            : (type == ValueType::kString ? kStringLenBytes : kMinNestedArrayBytes);
    if (count > cur_.remaining() / min_size) {
      return Corrupt("array count " + Str(count) + " of " + ValueTypeName(type) +
                     " cannot fit in the " + Str(cur_.remaining()) + " bytes left");
    }
    if (elem_size != 0) {
      KVMEM_ASSIGN_OR_RETURN(const uint8_t* raw, cur_.Take(count * elem_size, "array data"));
      if (type == ValueType::kBool) KVMEM_RETURN_IF_ERROR(CheckBools(raw, count));
      return Array::Fixed(type, count, raw);
    }
    if (type == ValueType::kString) {
      std::vector<std::string_view> strings;
      strings.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        auto s = cur_.ReadString("string length");
        if (!s.ok()) return s.status().WithContext("element " + Str(i));
        strings.push_back(*s);
      }
      return Array::Strings(std::move(strings));
    }
    std::vector<Array> nested;
    nested.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      auto a = ReadArray(depth + 1);
      if (!a.ok()) return a.status().WithContext("element " + Str(i));
      nested.push_back(std::move(*a));
    }
    return Array::Nested(std::move(nested));
  }

  Result<Value> ReadValue(ValueType type) {
    if (size_t size = ValueTypeSize(type); size != 0) {
      KVMEM_ASSIGN_OR_RETURN(const uint8_t* p, cur_.Take(size, ValueTypeName(type)));
      if (type == ValueType::kBool) KVMEM_RETURN_IF_ERROR(CheckBools(p, 1));
      return Value::Scalar(type, p);
    }
    if (type == ValueType::kString) {
      KVMEM_ASSIGN_OR_RETURN(std::string_view s, cur_.ReadString("string length"));
      return Value::String(s);
    }
    KVMEM_ASSIGN_OR_RETURN(Array array, ReadArray(1));
    f_->arrays_.push_back(std::make_unique<Array>(std::move(array)));
    return Value::OfArray(f_->arrays_.back().get());
  }

  Status ReadMetadata(uint64_t n_kv) {
    f_->metadata_.reserve(n_kv);
    f_->key_index_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      auto key = cur_.ReadString("key length");
      if (!key.ok()) return key.status().WithContext("metadata key #" + Str(i));
      if (key->empty()) return Corrupt("metadata key #" + Str(i) + " is empty");
      if (!f_->key_index_.emplace(*key, i).second) {
        return Corrupt("duplicate metadata key " + Quoted(*key));
      }
      auto value = [&]() -> Result<Value> {
        KVMEM_ASSIGN_OR_RETURN(ValueType type, ReadType("value type"));
        return ReadValue(type);
      }();
      if (!value.ok()) return value.status().WithContext("metadata " + Quoted(*key));
      f_->metadata_.push_back({*key, *value});
    }
    return Status::Ok();
  }

  Status ApplyGeneralKeys() {
    if (const Value* v = f_->Find(KeyPattern(Key::kGeneralAlignment))) {
      if (!IsIntegerType(v->type())) {
        return Corrupt("general.alignment has type " + v->TypeName() +
                       ", expected an unsigned integer");
      }
      std::optional<uint64_t> a = v->AsUint();
      if (!a || *a == 0 || (*a & (*a - 1)) != 0) {
        std::string shown = a ? Str(*a) : std::to_string(*v->AsInt());
        return Corrupt("general.alignment " + shown + " is not a nonzero power of two");
      }
      f_->alignment_ = *a;
    }
    if (const Value* v = f_->Find(KeyPattern(Key::kGeneralArchitecture))) {
      if (!v->AsString()) {
        return Corrupt("general.architecture has type " + v->TypeName() + ", expected string");
      }
      f_->architecture_ = *v->AsString();
    }
    return Status::Ok();
  }

  Status ReadTensorInfo(TensorInfo* t, std::string_view name) {
    KVMEM_ASSIGN_OR_RETURN(uint32_t n_dims, cur_.Read<uint32_t>("n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Corrupt("n_dims " + Str(n_dims) + " is out of range [1, " + Str(kMaxDims) + "]");
    }
    t->n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      KVMEM_ASSIGN_OR_RETURN(int64_t dim, cur_.Read<int64_t>("dimension"));
      if (dim == 0) return Corrupt("dimension " + Str(d) + " is zero");
      if (dim < 0) return Corrupt("dimension " + Str(d) + " is negative or too large");
      t->dims[d] = dim;
    }
    KVMEM_ASSIGN_OR_RETURN(uint32_t type_id, cur_.Read<uint32_t>("type"));
    const DTypeInfo* info = GetDTypeInfo(type_id);
    if (info == nullptr) {
      std::string msg = "unknown tensor type id " + Str(type_id);
      if (type_id == 4 || type_id == 5) msg += " (Q4_2/Q4_3, removed from ggml)";
      return Unsupported(msg);
    }
    t->type = static_cast<DType>(type_id);
    KVMEM_ASSIGN_OR_RETURN(t->offset, cur_.Read<uint64_t>("data offset"));

    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; ++d) {
      if (!CheckedMul(n, static_cast<uint64_t>(t->dims[d]), &n) ||
          n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Corrupt("element count overflows (dimension " + Str(d) + ")");
      }
    }
    t->n_elements = static_cast<int64_t>(n);
    if (t->dims[0] % info->block_size != 0) {
      return Corrupt("row length (dimension 0) " + Str(t->dims[0]) + " is not a multiple of the " +
                     info->name + " block size " + Str(info->block_size));
    }
    if (!CheckedMul(n / info->block_size, info->type_size, &t->n_bytes)) {
      return Corrupt("byte size overflows");
    }
    if (t->offset % f_->alignment_ != 0) {
      return Corrupt("data offset " + Str(t->offset) + " is not a multiple of the alignment " +
                     Str(f_->alignment_));
    }
    t->name = std::string(name);
    return Status::Ok();
  }

  Status ReadTensorInfos(uint64_t n_tensors) {
    f_->tensors_.reserve(n_tensors);
    f_->tensor_index_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      auto name = cur_.ReadString("name length");
      if (!name.ok()) return name.status().WithContext("tensor #" + Str(i));
      TensorInfo t;
      Status s = ReadTensorInfo(&t, *name);
      if (!s.ok()) return s.WithContext("tensor " + Quoted(*name));
      if (!f_->tensor_index_.emplace(*name, i).second) {
        return Corrupt("duplicate tensor name " + Quoted(*name));
      }
      f_->tensors_.push_back(std::move(t));
    }
    return Status::Ok();
  }

  Status PlaceTensors() {
    if (!CheckedAlignUp(cur_.offset(), f_->alignment_, &f_->data_offset_)) {
      return Corrupt("data section offset overflows with general.alignment " + Str(f_->alignment_));
    }
    uint64_t size = f_->bytes_.size();
    uint64_t data_size = size > f_->data_offset_ ? size - f_->data_offset_ : 0;
    for (TensorInfo& t : f_->tensors_) {
      uint64_t end;
      if (!CheckedAdd(t.offset, t.n_bytes, &end) || end > data_size) {
        return Corrupt("tensor " + Quoted(t.name) + ": data at offset " + Str(t.offset) + " (" +
                       Str(t.n_bytes) + " bytes) extends past end of file (data section has " +
                       Str(data_size) + " bytes)");
      }
      t.data = f_->bytes_.data() + f_->data_offset_ + t.offset;
    }
    std::vector<size_t> order(f_->tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    const auto& ts = f_->tensors_;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return ts[a].offset < ts[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorInfo& prev = ts[order[i - 1]];
      const TensorInfo& cur = ts[order[i]];
      if (prev.offset + prev.n_bytes > cur.offset) {  // no overflow: checked above
        return Corrupt("tensor " + Quoted(cur.name) + ": data at offset " + Str(cur.offset) +
                       " overlaps tensor " + Quoted(prev.name) + " (offset " + Str(prev.offset) +
                       ", " + Str(prev.n_bytes) + " bytes)");
      }
    }
    return Status::Ok();
  }

  GgufFile* f_;
  Cursor cur_;
};

Result<GgufFile> GgufFile::Parse(std::span<const uint8_t> bytes) {
  GgufFile f;
  f.bytes_ = bytes;
  KVMEM_RETURN_IF_ERROR(Parser(&f).Run());
  return Result<GgufFile>(std::move(f));
}

Result<GgufFile> GgufFile::Open(const std::string& path) {
  KVMEM_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  GgufFile f;
  f.mapped_ = std::move(mapped);
  f.bytes_ = f.mapped_.bytes();
  Status s = Parser(&f).Run();
  if (!s.ok()) return s.WithContext("'" + path + "'");
  return Result<GgufFile>(std::move(f));
}

const Value* GgufFile::Find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<const TensorInfo*> GgufFile::GetTensor(std::string_view name) const {
  const TensorInfo* t = FindTensor(name);
  if (t == nullptr) return NotFound("tensor " + Quoted(name) + " not found");
  return t;
}

}  // namespace kvmem::gguf
