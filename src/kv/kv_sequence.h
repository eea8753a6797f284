// One sequence's KV memory: the pool blocks it owns, where its next rows go, and the view its
// attention reads. New tokens get rows appended contiguously (filling the last block first) and
// are added to every layer's view at their positions. Freeing the sequence frees its blocks.
//
// Sliding-window layers keep bounded memory: ReleaseLayerThrough(layer, cut) tells the sequence
// that no later token reads rows of `layer` at positions <= cut; each whole block whose rows all
// lie there gives that layer's storage back to the pool and leaves the layer's view. The engine
// calls it after every persistent pass (engine/forward.h) unless window release is off — as it
// must be for a policy that moves history to later positions (re-placed rows would need the
// storage back). Released rows cannot come back: tokens must then be computed at positions
// >= released_through(layer) + window, which the forward pass checks.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_pool.h"
#include "kv/kv_view.h"

namespace kvmem::kv {

class KvSequence {
 public:
  explicit KvSequence(KvPool* pool);
  // A sequence in parent's pool whose view reads everything parent's view reads, without owning
  // those rows; its own rows are appended after them (in blocks of its own). Several replies to
  // one prefilled prompt (n > 1 choices) each decode on a fork. Precondition: parent outlives
  // the fork and neither frees, overwrites nor releases (sliding window) the shared rows while
  // it lives, so decode the forks before the parent goes on.
  static std::unique_ptr<KvSequence> Fork(const KvSequence& parent);
  // Adds rows this sequence reads but does not own to every layer's view, read at positions
  // first_pos, first_pos + 1, ... (a prefix shared from the prefix cache,
  // memory/prefix/prefix_cache.h). Same precondition as Fork: the rows are written, and their
  // owner neither frees, overwrites nor releases them while this sequence reads them. Call
  // before the sequence's own rows are appended, so positions stay in view order.
  void ReadShared(std::span<const RowRef> rows, int64_t first_pos);
  // Hands the sequence's blocks to the caller, who frees them (KvPool::Free) when done: the
  // sequence then owns and reads nothing (the prefix cache keeps a finished turn's rows).
  std::vector<int32_t> TakeBlocks();
  ~KvSequence();
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  // Rows for n new tokens at positions first_pos.. (one RowRef per token, in order), appended
  // to the view of every layer. On failure nothing changes.
  Result<std::vector<RowRef>> AppendRows(int n, int64_t first_pos);

  // Drops every row after the first n in storage order, from the pool and from every view list,
  // freeing blocks that become empty. Truncate(0) also forgets what window release gave back. Used when a prompt diverges from the cached one, and to
  // roll back rows of a pass that must leave nothing behind.
  void Truncate(int64_t n);
  void Clear() { Truncate(0); }

  // True if r is one of the rows written so far.
  bool Owns(RowRef r) const;

  bool window_release() const { return window_release_; }
  void set_window_release(bool on) { window_release_ = on; }
  // Releases `layer`'s storage of the leading whole blocks whose rows all sit at rotated
  // positions <= cut (see above). Returns the bytes given back.
  size_t ReleaseLayerThrough(int layer, int64_t cut);
  // Gives back `layer`'s storage of the block at blocks()[index] without the window's
  // bookkeeping: rows a policy keeps elsewhere (a compressed cache's unused slots). The block's
  // rows must not be read or written in that layer again, nor the block appended to.
  void ReleaseStorage(size_t index, int layer);
  // The highest position of a row whose `layer` storage was released, or kNoPosition.
  int64_t released_through(int layer) const { return released_through_[layer]; }

  const KvView& view() const { return view_; }
  KvView& view() { return view_; }
  // Rows written so far (storage order).
  int64_t n_rows() const { return n_rows_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  KvPool* pool() const { return pool_; }

 private:
  KvPool* pool_;
  std::vector<int32_t> blocks_;
  int64_t n_rows_ = 0;
  KvView view_;
  bool window_release_ = true;
  std::vector<size_t> released_blocks_;     // (n_layers) leading blocks of blocks_ released
  std::vector<int64_t> released_through_;  // (n_layers)
};

// The row of storage index i of seq (a sequence appends rows in storage order).
inline RowRef RowAt(const KvSequence& seq, int64_t i) {
  const int br = seq.pool()->geometry().block_rows;
  return {seq.blocks()[static_cast<size_t>(i / br)], static_cast<int32_t>(i % br)};
}

}  // namespace kvmem::kv
