// What a sequence's attention reads: for each layer and KV head, an ordered list of runs of pool
// rows, each row read at a logical position. Runs make the plain contiguous case cheap (one run
// per block) while allowing any selection: dropped spans, concatenated blocks, re-placed
// history, different rows per layer or per head.
//
// Lists are shared until someone asks for their own: every (layer, head) reads the view-wide
// list unless its layer has its own list (mutable_layer) or the head has its own
// (mutable_head). So per-layer/per-head selection costs nothing where unused.
//
// Rows can be hidden (removed from lists, the pool row stays allocated) or killed: replaced by
// dead slots (runs with block == kDeadBlock) that keep their place in the list but are never
// attended to — the sentinel of IntentKV's slot-map eviction, which keeps the indices of the
// surviving rows stable.
// Thread-safety: a plain value; no internal synchronization.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kv/kv_pool.h"

namespace kvmem::kv {

inline constexpr int32_t kDeadBlock = -1;

// n_rows rows of one block starting at first_row, read at positions first_pos, first_pos+1, ...
// A run with block == kDeadBlock is n_rows dead slots (first_row is meaningless).
struct ViewRun {
  int32_t block;
  int32_t first_row;
  int32_t n_rows;
  int64_t first_pos;

  bool dead() const { return block == kDeadBlock; }
};

class KvView {
 public:
  KvView(int n_layers = 0, int n_kv_heads = 1);
  // A deep copy: every list, own or shared, copied (a forked sequence reads what this reads).
  KvView Clone() const;

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }

  // The list (layer l, KV head g) reads.
  const std::vector<ViewRun>& list(int l, int g) const;
  // The list of layer l (its head 0's list when heads differ; used where heads agree).
  const std::vector<ViewRun>& layer(int l) const { return list(l, 0); }
  // Gives layer l its own list (copied from the shared one on first call). Heads of that layer
  // that already have their own lists keep them.
  std::vector<ViewRun>& mutable_layer(int l);
  // Gives (l, g) its own list, copied from what it read so far.
  std::vector<ViewRun>& mutable_head(int l, int g);
  bool has_own_list(int l) const { return layer_[l] != nullptr; }

  // Appends rows to every list, merging with the last run when contiguous in block and position.
  void Append(RowRef first, int n, int64_t first_pos);
  // Appends rows to (l, g)'s own list only (given one first), merging likewise.
  void AppendToHead(int l, int g, RowRef first, int n, int64_t first_pos) {
    AppendTo(mutable_head(l, g), first, n, first_pos);
  }
  // Live rows (l, g) reads, and slots including dead ones.
  int64_t n_rows(int l, int g = 0) const;
  int64_t n_slots(int l, int g = 0) const;
  // Keeps the first n slots of every list.
  void Truncate(int64_t n);
  void Clear();

  // Removes rows first..first+n-1 of first.block from the selected lists: all of them
  // (layer = -1), the lists of one layer (head = -1: the layer's and its heads'), or one head's.
  // Selecting a layer or head gives it its own list first.
  void Hide(RowRef first, int n, int layer = -1, int head = -1);
  // Like Hide, but the rows become dead slots in place.
  void Kill(RowRef first, int n, int layer = -1, int head = -1);

 private:
  using List = std::vector<ViewRun>;
  static void AppendTo(List& runs, RowRef first, int n, int64_t first_pos);
  static void TruncateList(List& runs, int64_t n);
  static void EditList(List& runs, RowRef first, int n, bool kill);
  void ForSelected(int layer, int head, const std::function<void(List&)>& fn);
  std::unique_ptr<List>& head_slot(int l, int g) { return head_[l * n_kv_heads_ + g]; }
  const std::unique_ptr<List>& head_slot(int l, int g) const { return head_[l * n_kv_heads_ + g]; }

  int n_layers_;
  int n_kv_heads_;
  List shared_;
  std::vector<std::unique_ptr<List>> layer_;  // nullptr: reads shared_
  std::vector<std::unique_ptr<List>> head_;   // (n_layers, n_kv_heads); nullptr: reads layer
};

}  // namespace kvmem::kv
