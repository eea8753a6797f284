#include "memory/store/block_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "kernels/attention.h"
#include "kernels/kivi.h"
#include "memory/store/hash.h"
#include "core/utf8.h"

namespace kvmem::memory::store {
namespace {

static_assert(std::endian::native == std::endian::little,
              "block files hold the pool's bytes as-is: little-endian hosts only");

constexpr int kGroup = kernels::kKiviGroupRows;
// Stored positions lie in (-2^62, 2^62). Real ones are below a context length (< 2^31); the
// bound leaves the kv layer and the policies room for a run's end and the next turn's positions
// (pos + rows) in int64. A block whose positions ran up to INT64_MAX overflowed
// KvView::AppendTo on load (found by fuzz/safetensors_block_fuzz.cpp).
constexpr int64_t kMaxAbsPosition = int64_t{1} << 62;
constexpr std::string_view kBlockFormat = "kvmem-kv-block";
constexpr std::string_view kBlockVersion = "1";

std::string LayerName(int l) { return "layer." + std::to_string(l); }
std::string StagingName(int l) { return "layer." + std::to_string(l) + ".k_staging"; }

std::string IntList(auto values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + std::to_string(values[i]);
  return s + "]";
}

bool Kivi(const kv::KvPool& pool) { return pool.formats().k == kv::KvFormat::kKivi4; }
// kivi4: rows in whole groups; the rest sit in staging.
int32_t QuantizedRows(int32_t n) { return n / kGroup * kGroup; }
bool HasStaging(const kv::KvPool& pool, int32_t n_rows) {
  return Kivi(pool) && QuantizedRows(n_rows) < n_rows;
}
size_t StagingElems(const kv::KvPool& pool) {
  const kv::KvGeometry& g = pool.geometry();
  return static_cast<size_t>(g.n_kv_heads) * kGroup * g.head_dim_k;
}

// The metadata every block of this pool and identity carries (text_span aside).
std::vector<std::pair<std::string, std::string>> ExpectedMetadata(
    const kv::KvPool& pool, int32_t n_rows, std::string_view fingerprint,
    std::span<const int32_t> tokens, const std::vector<int>& released) {
  const kv::KvGeometry& g = pool.geometry();
  return {{"format", std::string(kBlockFormat)},
          {"format_version", std::string(kBlockVersion)},
          {"model_fingerprint", std::string(fingerprint)},
          {"k_format", kv::KvFormatName(pool.formats().k)},
          {"v_format", kv::KvFormatName(pool.formats().v)},
          {"n_layers", std::to_string(g.n_layers)},
          {"n_kv_heads", std::to_string(g.n_kv_heads)},
          {"head_dim_k", std::to_string(g.head_dim_k)},
          {"head_dim_v", std::to_string(g.head_dim_v)},
          {"block_rows", std::to_string(g.block_rows)},
          {"n_rows", std::to_string(n_rows)},
          {"token_ids", IntList(tokens)},
          {"released_layers", IntList(released)}};
}

// Zeroes the bytes of rows >= n_rows in one layer's copy (kv_pool.h layout).
Status ZeroUnwrittenRows(const kv::KvPool& pool, int32_t n_rows, std::span<uint8_t> layer) {
  const kv::KvGeometry& g = pool.geometry();
  const kernels::KvLayout& lay = pool.layout();
  const size_t rows = g.block_rows;
  const size_t k_unit =
      Kivi(pool) ? kernels::KiviGroupBytes(g.head_dim_k) : kernels::KRowBytes(lay.k, g.head_dim_k);
  const size_t k_head = Kivi(pool) ? rows / kGroup * k_unit : rows * k_unit;
  const size_t k_keep = Kivi(pool) ? QuantizedRows(n_rows) / kGroup * k_unit : n_rows * k_unit;
  const size_t v_row = kernels::VRowBytes(lay.v, g.head_dim_v);
  const size_t v_head = rows * v_row;
  if (g.n_kv_heads * (k_head + v_head) != layer.size()) {
    return Internal("KV pool layer layout is not the one block files assume (" +
                    std::to_string(layer.size()) + " bytes per layer)");
  }
  uint8_t* p = layer.data();
  for (int h = 0; h < g.n_kv_heads; ++h) std::memset(p + h * k_head + k_keep, 0, k_head - k_keep);
  p += g.n_kv_heads * k_head;
  for (int h = 0; h < g.n_kv_heads; ++h) {
    std::memset(p + h * v_head + n_rows * v_row, 0, v_head - n_rows * v_row);
  }
  return Status::Ok();
}

Status Mismatch(const std::string& what, std::string_view got, std::string_view want) {
  return Corrupt("block " + what + " is " + Quoted(got) + ", expected " + Quoted(want));
}

Status CheckTensor(const SafetensorsView& v, const std::string& name, StDType dtype,
                   const std::vector<int64_t>& shape, const StTensor** out) {
  const StTensor* t = v.Find(name);
  if (t == nullptr) return Corrupt("block tensor '" + name + "' is missing");
  if (t->dtype != dtype) {
    return Corrupt("block tensor '" + name + "' has dtype " + StDTypeName(t->dtype) +
                   ", expected " + StDTypeName(dtype));
  }
  if (t->shape != shape) {
    return Corrupt("block tensor '" + name + "' has shape " + IntList(t->shape) + ", expected " +
                   IntList(shape));
  }
  *out = t;
  return Status::Ok();
}

}  // namespace

Result<EncodedBlock> EncodeBlock(const kv::KvPool& pool, int32_t block, int32_t n_rows,
                                 const BlockIdentity& id) {
  const kv::KvGeometry& g = pool.geometry();
  if (n_rows < 1 || n_rows > g.block_rows || id.tokens.size() != static_cast<size_t>(n_rows)) {
    return InvalidArgument("block of " + std::to_string(n_rows) + " rows with " +
                           std::to_string(id.tokens.size()) + " token ids");
  }
  EncodedBlock e;
  e.positions_.resize(n_rows);
  for (int32_t r = 0; r < n_rows; ++r) {
    e.positions_[r] = pool.rotated_pos({block, r});
    if (e.positions_[r] == kv::kNoPosition) {
      return InvalidArgument("row " + std::to_string(r) + " of the block has no position");
    }
  }
  std::vector<kv::KvPool::RawLayer> raw(g.n_layers);
  for (int l = 0; l < g.n_layers; ++l) {
    raw[l] = pool.raw_layer(block, l);
    if (raw[l].data.empty()) {
      e.released_.push_back(l);
    } else if (pool.written_rows(block, l) != n_rows) {
      return InvalidArgument("layer " + std::to_string(l) + " has " +
                             std::to_string(pool.written_rows(block, l)) +
                             " rows written, the sequence holds " + std::to_string(n_rows) +
                             " in this block (saved mid-pass?)");
    }
  }
  for (const auto& [k, v] :
       ExpectedMetadata(pool, n_rows, id.model_fingerprint, id.tokens, e.released_)) {
    KVMEM_RETURN_IF_ERROR(e.writer_.AddMetadata(k, v));
  }
  if (id.text_span) {
    KVMEM_RETURN_IF_ERROR(e.writer_.AddMetadata(
        "text_span",
        std::to_string(id.text_span->first) + ":" + std::to_string(id.text_span->second)));
  }
  const bool partial = n_rows < g.block_rows;
  for (int l = 0; l < g.n_layers; ++l) {
    if (raw[l].data.empty()) continue;
    std::span<const uint8_t> data = raw[l].data;
    if (partial) {
      std::vector<uint8_t>& copy = e.layer_copies_.emplace_back(data.begin(), data.end());
      KVMEM_RETURN_IF_ERROR(ZeroUnwrittenRows(pool, n_rows, copy));
      data = copy;
    }
    KVMEM_RETURN_IF_ERROR(
        e.writer_.AddTensor(LayerName(l), StDType::kU8, {static_cast<int64_t>(data.size())}, data));
    if (HasStaging(pool, n_rows)) {
      if (raw[l].staging.size() != StagingElems(pool)) {
        return Internal("layer " + std::to_string(l) + " has no kivi4 staging for " +
                        std::to_string(n_rows) + " rows");
      }
      std::vector<uint16_t>& st =
          e.staging_.emplace_back(raw[l].staging.begin(), raw[l].staging.end());
      const size_t used = static_cast<size_t>(n_rows - QuantizedRows(n_rows)) * g.head_dim_k;
      for (int h = 0; h < g.n_kv_heads; ++h) {
        uint16_t* head = st.data() + static_cast<size_t>(h) * kGroup * g.head_dim_k;
        std::fill(head + used, head + static_cast<size_t>(kGroup) * g.head_dim_k, 0);
      }
      KVMEM_RETURN_IF_ERROR(e.writer_.AddTensor(
          StagingName(l), StDType::kF16, {g.n_kv_heads, kGroup, g.head_dim_k},
          {reinterpret_cast<const uint8_t*>(st.data()), st.size() * sizeof(uint16_t)}));
    }
  }
  KVMEM_RETURN_IF_ERROR(e.writer_.AddTensor(
      "positions", StDType::kI64, {n_rows},
      {reinterpret_cast<const uint8_t*>(e.positions_.data()), e.positions_.size() * 8}));

  e.header_ = e.writer_.Header();
  Xxh128Stream h;
  for (std::span<const uint8_t> p : e.pieces()) {
    h.Update(p);
    e.bytes_ += p.size();
  }
  e.checksum_ = h.HexDigest();
  return e;
}

namespace {

// What a block's header says, checked, before any of its data is read.
struct BlockTensors {
  std::vector<const StTensor*> layers;   // (n_layers) nullptr: released
  std::vector<const StTensor*> staging;  // (n_layers) nullptr: none
  const StTensor* positions = nullptr;
};

Result<BlockTensors> CheckHeader(const SafetensorsView& v, const BlockEntry& entry,
                                 const BlockIdentity& expected, const kv::KvPool& pool) {
  const kv::KvGeometry& g = pool.geometry();
  for (const auto& [key, want] : ExpectedMetadata(pool, entry.n_rows, expected.model_fingerprint,
                                                  expected.tokens, entry.released_layers)) {
    const std::string* got = v.FindMetadata(key);
    if (got == nullptr) return Corrupt("block metadata '" + key + "' is missing");
    if (*got != want) return Mismatch("metadata '" + key + "'", *got, want);
  }
  BlockTensors t;
  t.layers.resize(g.n_layers);
  t.staging.resize(g.n_layers);
  size_t expected_tensors = 1;  // positions
  size_t r = 0;
  for (int l = 0; l < g.n_layers; ++l) {
    if (r < entry.released_layers.size() && entry.released_layers[r] == l) {
      ++r;
      if (v.Find(LayerName(l)) != nullptr) {
        return Corrupt("block tensor '" + LayerName(l) + "' present for a released layer");
      }
      continue;
    }
    KVMEM_RETURN_IF_ERROR(CheckTensor(v, LayerName(l), StDType::kU8,
                                      {static_cast<int64_t>(pool.layer_bytes())}, &t.layers[l]));
    ++expected_tensors;
    if (HasStaging(pool, entry.n_rows)) {
      KVMEM_RETURN_IF_ERROR(CheckTensor(v, StagingName(l), StDType::kF16,
                                        {g.n_kv_heads, kGroup, g.head_dim_k}, &t.staging[l]));
      ++expected_tensors;
    }
  }
  KVMEM_RETURN_IF_ERROR(CheckTensor(v, "positions", StDType::kI64, {entry.n_rows}, &t.positions));
  if (v.tensors.size() != expected_tensors) {
    return Corrupt("block has " + std::to_string(v.tensors.size()) + " tensors, expected " +
                   std::to_string(expected_tensors));
  }
  return t;
}

Status CheckPositions(const std::vector<int64_t>& positions, const BlockEntry& entry) {
  if (positions[0] != entry.first_pos) {
    return Corrupt("block positions start at " + std::to_string(positions[0]) +
                   ", the manifest says first_pos " + std::to_string(entry.first_pos));
  }
  for (int64_t p : positions) {
    if (p == kv::kNoPosition) return Corrupt("block positions hold the no-position marker");
    if (p <= -kMaxAbsPosition || p >= kMaxAbsPosition) {
      return Corrupt("block position " + std::to_string(p) + " is outside (-2^62, 2^62)");
    }
  }
  return Status::Ok();
}

// Appends the rows (runs of consecutive positions become view runs at those positions) and
// gives their positions; returns the block they fill.
Result<int32_t> AppendBlockRows(const std::vector<int64_t>& positions, kv::KvSequence* seq) {
  const int32_t n = static_cast<int32_t>(positions.size());
  int32_t block = -1;
  for (int32_t i = 0; i < n;) {
    int32_t j = i + 1;
    while (j < n && positions[j - 1] != std::numeric_limits<int64_t>::max() &&
           positions[j] == positions[j - 1] + 1) {
      ++j;
    }
    KVMEM_ASSIGN_OR_RETURN(std::vector<kv::RowRef> rows, seq->AppendRows(j - i, positions[i]));
    block = rows.front().block;
    i = j;
  }
  for (int32_t r = 0; r < n; ++r) seq->pool()->set_rotated_pos({block, r}, positions[r]);
  return block;
}

std::span<uint8_t> AsBytes(auto& v) {
  return {reinterpret_cast<uint8_t*>(v.data()), v.size() * sizeof(v[0])};
}

Status ChecksumMismatch(const std::string& sum, const std::string& want) {
  return Corrupt("block file checksum " + sum + " does not match the manifest's " + want +
                 " (corrupted on disk?)");
}

// A damaged file is named as such whatever check it failed first: `st` stays the error for a
// file whose checksum holds (rewritten consistently) or a pool that cannot take it, and for a
// read that failed.
Status Diagnose(const Blob& file, const std::string& want, Status st) {
  if (st.ok() || st.code() == ErrorCode::kIo) return st;
  Xxh128Stream h;
  std::vector<uint8_t> piece(size_t{1} << 20);
  for (uint64_t at = 0; at < file.size(); at += piece.size()) {
    const auto p = std::span(piece).first(std::min<uint64_t>(piece.size(), file.size() - at));
    KVMEM_RETURN_IF_ERROR(file.ReadAt(at, p));
    h.Update(p);
  }
  const std::string sum = h.HexDigest();
  return sum != want ? ChecksumMismatch(sum, want) : st;
}

}  // namespace

Result<BlockLoad> BlockLoad::Start(std::unique_ptr<Blob> file, const BlockEntry& entry,
                                   const BlockIdentity& expected, kv::KvSequence* seq) {
  if (file->size() != entry.bytes) {
    return Corrupt("block file is " + std::to_string(file->size()) + " bytes, the manifest says " +
                   std::to_string(entry.bytes) + " (truncated or replaced?)");
  }
  BlockLoad b(std::move(file));
  Status st = b.ReadHeader(entry, expected, seq);
  if (!st.ok()) return Diagnose(*b.file_, entry.checksum, std::move(st));
  return b;
}

Status BlockLoad::ReadHeader(const BlockEntry& entry, const BlockIdentity& expected,
                             kv::KvSequence* seq) {
  kv::KvPool& pool = *seq->pool();
  const kv::KvGeometry& g = pool.geometry();
  checksum_ = entry.checksum;
  released_ = entry.released_layers;
  // Headers hold a few numbers per tensor and the token ids: a few bytes per row.
  const uint64_t max_header = (1 << 16) + 16ull * g.block_rows + 128ull * g.n_layers;
  prefix_.resize(std::min<uint64_t>(8, file_->size()));
  KVMEM_RETURN_IF_ERROR(file_->ReadAt(0, prefix_));
  KVMEM_ASSIGN_OR_RETURN(const uint64_t prefix_bytes,
                         SafetensorsPrefixBytes(prefix_, file_->size(), max_header));
  prefix_.resize(prefix_bytes);
  KVMEM_RETURN_IF_ERROR(file_->ReadAt(8, std::span(prefix_).subspan(8)));
  KVMEM_ASSIGN_OR_RETURN(const SafetensorsView v,
                         ParseSafetensorsHeader(prefix_, file_->size(), max_header));
  KVMEM_ASSIGN_OR_RETURN(const BlockTensors t, CheckHeader(v, entry, expected, pool));

  positions_.resize(entry.n_rows);
  KVMEM_RETURN_IF_ERROR(file_->ReadAt(t.positions->offset, AsBytes(positions_)));
  KVMEM_RETURN_IF_ERROR(CheckPositions(positions_, entry));
  KVMEM_ASSIGN_OR_RETURN(block_, AppendBlockRows(positions_, seq));

  // Where each tensor goes, in file order (they tile the file after the header).
  staging_.resize(g.n_layers);
  for (const StTensor& tensor : v.tensors) {
    std::span<uint8_t> into;
    if (&tensor == t.positions) into = AsBytes(positions_);  // read already
    for (int l = 0; l < g.n_layers && into.empty(); ++l) {
      if (&tensor == t.layers[l]) {
        into = pool.LoadLayerStorage(block_, l);
      } else if (&tensor == t.staging[l]) {
        staging_[l].resize(StagingElems(pool));
        into = AsBytes(staging_[l]);
      }
    }
    if (into.size() != tensor.bytes) {
      return Internal("block tensor '" + tensor.name + "' has no place in the pool");
    }
    pieces_.push_back({tensor.offset, into, &tensor == t.positions});
  }
  return Status::Ok();
}

Status BlockLoad::ReadData() {
  Xxh128Stream h;
  h.Update(prefix_);
  for (const Piece& p : pieces_) {
    if (!p.read) {
      Status st = file_->ReadAt(p.offset, p.into);
      if (!st.ok()) return Diagnose(*file_, checksum_, std::move(st));
    }
    h.Update(p.into);
  }
  const std::string sum = h.HexDigest();
  return sum == checksum_ ? Status::Ok() : ChecksumMismatch(sum, checksum_);
}

Status BlockLoad::Finish(kv::KvSequence* seq) {
  kv::KvPool& pool = *seq->pool();
  const int32_t n = static_cast<int32_t>(positions_.size());
  size_t r = 0;
  for (int l = 0; l < pool.geometry().n_layers; ++l) {
    if (r < released_.size() && released_[r] == l) {
      ++r;
      seq->view().Hide({block_, 0}, pool.geometry().block_rows, l);
      pool.ReleaseLayer(block_, l);
      continue;
    }
    KVMEM_RETURN_IF_ERROR(pool.CommitLoadedLayer(block_, l, staging_[l], n));
  }
  return Status::Ok();
}

}  // namespace kvmem::memory::store
