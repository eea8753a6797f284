// What a sequence's attention reads: per layer, an ordered list of runs of pool rows, each row
// read at a logical position. Runs make the plain contiguous case cheap (one run per block) while
// allowing any selection (dropped spans, concatenated blocks, re-placed history). Layers share
// one list until a caller asks for a layer of its own (mutable_layer), so the common case costs
// one list, not n_layers copies.
// Thread-safety: a plain value; no internal synchronization.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_pool.h"

namespace kvmem::kv {

// n_rows rows of one block starting at first_row, read at positions first_pos, first_pos+1, ...
struct ViewRun {
  int32_t block;
  int32_t first_row;
  int32_t n_rows;
  int64_t first_pos;
};

class KvView {
 public:
  explicit KvView(int n_layers = 0);

  int n_layers() const { return static_cast<int>(layer_.size()); }
  const std::vector<ViewRun>& layer(int l) const;
  // Gives layer l its own list (copied from the shared one on first call).
  std::vector<ViewRun>& mutable_layer(int l);
  bool has_own_list(int l) const { return layer_[l] != nullptr; }

  // Appends rows to every layer, merging with the last run when contiguous in block and position.
  void Append(RowRef first, int n, int64_t first_pos);
  // Number of rows layer l reads.
  int64_t n_rows(int l) const;
  // Keeps the first n rows of every layer.
  void Truncate(int64_t n);
  void Clear();

 private:
  static void AppendTo(std::vector<ViewRun>& runs, RowRef first, int n, int64_t first_pos);
  static void TruncateList(std::vector<ViewRun>& runs, int64_t n);

  std::vector<ViewRun> shared_;
  std::vector<std::unique_ptr<std::vector<ViewRun>>> layer_;  // nullptr: uses shared_
};

}  // namespace kvmem::kv
