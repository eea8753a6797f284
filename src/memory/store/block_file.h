// One KV block of an agent on disk: a safetensors file holding, for every layer of the block,
// the pool's stored bytes of that layer (kv_pool.h layout: K of every KV head, then V) and the
// block's row positions, so a load copies bytes back without converting anything.
//
//   tensors   "layer.<l>"            U8  (layer_bytes)       absent when the layer was released
//             "layer.<l>.k_staging"  F16 (n_kv_heads, 32, head_dim_k)  kivi4 K rows past the
//                                    last whole group of 32 (n_rows % 32 != 0) only
//             "positions"            I64 (n_rows)            rotated position of each row
//   metadata  format, format_version, model_fingerprint, k_format, v_format, n_layers,
//             n_kv_heads, head_dim_k, head_dim_v, block_rows, n_rows, token_ids ("[1,2]"),
//             released_layers ("[0,3]"), text_span ("<begin>:<end>" bytes of the agent's text;
//             only when the caller knows where each token's text ends)
//
// Bytes of rows a partial block has not written (and unused kivi4 staging rows) are written as
// zeros, never as whatever the pool's recycled memory held: the file must not leak another
// agent's rows, and equal contents must give equal bytes, since files are named by their
// XXH3-128 (content addressing: a name always means the same bytes).
// Thread-safe: pure functions; an EncodedBlock borrows pool memory (see EncodeBlock).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"
#include "memory/store/manifest.h"
#include "memory/store/safetensors.h"
#include "memory/store/store_backend.h"

namespace kvmem::memory::store {

// What a block's metadata records besides the pool's formats and geometry.
struct BlockIdentity {
  std::string_view model_fingerprint;
  std::span<const int32_t> tokens;                     // (n_rows) ids of the block's rows
  std::optional<std::pair<size_t, size_t>> text_span;  // [begin, end) bytes
};

// A block serialized and hashed, ready to be written.
class EncodedBlock {
 public:
  const std::string& checksum() const { return checksum_; }
  std::string file_name() const { return BlockFileName(checksum_); }
  uint64_t bytes() const { return bytes_; }
  const std::vector<int>& released_layers() const { return released_; }
  int64_t first_pos() const { return positions_.front(); }
  // The file as pieces (header, then tensors).
  std::vector<std::span<const uint8_t>> pieces() const { return writer_.Pieces(header_); }

 private:
  friend Result<EncodedBlock> EncodeBlock(const kv::KvPool&, int32_t, int32_t,
                                          const BlockIdentity&);
  SafetensorsWriter writer_;
  std::string header_;
  std::string checksum_;
  uint64_t bytes_ = 0;
  std::vector<int> released_;
  std::vector<int64_t> positions_;                  // (n_rows)
  std::vector<std::vector<uint8_t>> layer_copies_;  // zero-filled copies of partial layers
  std::vector<std::vector<uint16_t>> staging_;      // zero-filled kivi4 staging copies
};

// Serializes rows [0, n_rows) of `block`. Every layer with storage must have exactly n_rows
// rows written and every row a position (InvalidArgument otherwise: a sequence mid-pass cannot
// be saved). The result borrows the pool's layer memory of whole blocks: the block must not be
// written until the EncodedBlock is gone.
Result<EncodedBlock> EncodeBlock(const kv::KvPool& pool, int32_t block, int32_t n_rows,
                                 const BlockIdentity& id);

// Loading one block file into a sequence, in three steps so that the reads of many blocks can
// run on several threads. Start checks the file against its manifest entry (size), its framing,
// its metadata (fingerprint, formats, geometry, token ids, released layers) and every tensor's
// dtype and shape against what seq's pool stores, appends the block's rows at their positions
// and takes the pool storage its layers go to. ReadData reads each layer's bytes straight into
// that storage, hashing the file as they arrive (one read of every byte, no copy), and checks
// the manifest's checksum. Finish makes the rows written. Errors: Corrupt naming the first
// mismatch (for a damaged file, its checksum), IoError when a read fails; after one, the rows
// Start appended stay in seq, whose owner clears it.
// Thread-safety: Start and Finish mutate the sequence (one thread); ReadData of different
// blocks may run at once.
class BlockLoad {
 public:
  static Result<BlockLoad> Start(std::unique_ptr<Blob> file, const BlockEntry& entry,
                                 const BlockIdentity& expected, kv::KvSequence* seq);
  Status ReadData();
  Status Finish(kv::KvSequence* seq);

  const std::vector<int64_t>& positions() const { return positions_; }  // (n_rows)
  uint64_t bytes() const { return file_->size(); }

 private:
  struct Piece {
    uint64_t offset = 0;
    std::span<uint8_t> into;
    bool read = false;  // already read (the positions)
  };
  explicit BlockLoad(std::unique_ptr<Blob> file) : file_(std::move(file)) {}
  Status ReadHeader(const BlockEntry& entry, const BlockIdentity& expected, kv::KvSequence* seq);

  std::unique_ptr<Blob> file_;
  std::string checksum_;
  std::vector<int> released_;
  std::vector<uint8_t> prefix_;  // the length and the header
  std::vector<int64_t> positions_;
  int32_t block_ = -1;
  std::vector<std::vector<uint16_t>> staging_;  // (n_layers) kivi4 staging or empty
  std::vector<Piece> pieces_;                   // every tensor, in file order
};

}  // namespace kvmem::memory::store
