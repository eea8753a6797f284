// The prefix cache of turns that name no agent: a RadixTree (radix_tree.h) over the rows of one
// KvPool shared by every such turn. A turn begins by matching its prompt against its tenant's
// cached prefixes; its sequence reads the matched rows without owning them (locked in the tree
// while it lives) and appends its own rows after them, in blocks of its own. When the turn ends
// well its rows (prompt and reply) are given to the tree, rows the tree already had are released;
// when it is aborted its own rows are freed and the tree is as before.
//
// Ownership of blocks: a block belongs to a live sequence until the sequence's turn commits;
// from then on the cache counts, per block, the rows the tree holds (held_) and frees the block
// when that count drops to zero (eviction, duplicates). A block is never shared by two live
// sequences' own rows, so writes never race.
//
// Memory: budget_bytes bounds the bytes of blocks the tree holds (whole blocks: a block with one
// held row counts whole), and the tree's own token budget is the same number. room_blocks more
// are for the rows of turns in flight; Begin evicts cached prefixes when the pool lacks room for
// a turn. Blocks are kBlockRows rows (not the agents' 256): a short prompt's last block is held
// whole, so small blocks waste less of the budget.
//
// Sliding-window layers: sequences in this pool never release layer storage (window release
// off): rows the tree holds must stay readable by every later turn in every layer.
//
// Thread-safety: thread-safe. One mutex serializes tree operations and the block counts; the pool
// itself is safe for concurrent Allocate/Free beside reads of other blocks (kv/kv_pool.h). Each
// PrefixTurn is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/kv_format.h"
#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"
#include "memory/prefix/radix_tree.h"

namespace kvmem::memory::prefix {

struct PrefixCacheStats {
  RadixStats tree;
  int64_t blocks_held = 0;  // pool blocks holding rows of the tree
  int64_t bytes_held = 0;   // blocks_held * bytes per block
  int64_t turns = 0;        // turns in flight (holding locks)
};

class PrefixCache;

// One turn's hold on the cache: its sequence (matched prefix + own rows) and the lock on the
// matched prefix. Destroying an uncommitted turn aborts it.
class PrefixTurn {
 public:
  ~PrefixTurn();
  PrefixTurn(const PrefixTurn&) = delete;
  PrefixTurn& operator=(const PrefixTurn&) = delete;

  // Reads the matched rows at positions 0..matched()-1; own rows go at positions matched()...
  kv::KvSequence* seq() { return seq_.get(); }
  const kv::KvSequence& seq() const { return *seq_; }
  int64_t matched() const { return static_cast<int64_t>(rows_.size()); }
  // Position of the next own row.
  int64_t next_position() const { return matched() + seq_->n_rows(); }

  // Gives the turn's rows to the cache: tokens (matched() + seq()->n_rows()) are the ids of
  // every row the sequence reads, in position order, the matched prefix first. The sequence is
  // empty afterwards. Idempotent only in that a second call does nothing.
  void Commit(std::span<const int32_t> tokens);
  // Frees the turn's own rows and unlocks its prefix; the tree is as before the turn.
  void Abort();

 private:
  friend class PrefixCache;
  PrefixTurn(PrefixCache* cache, std::string tenant, RadixNode* node, std::vector<kv::RowRef> rows,
             std::unique_ptr<kv::KvSequence> seq);

  PrefixCache* cache_;
  std::string tenant_;
  RadixNode* node_;               // locked while the turn is open; null when done
  std::vector<kv::RowRef> rows_;  // (matched) the prefix's rows
  std::unique_ptr<kv::KvSequence> seq_;
};

class PrefixCache final : private RowOwner {
 public:
  static constexpr int kBlockRows = 32;  // a multiple of kivi4's group of 32 rows

  // geometry: the model's (block_rows is replaced by kBlockRows). budget_bytes > 0.
  PrefixCache(kv::KvGeometry geometry, kv::KvFormats formats, size_t budget_bytes, int room_blocks);
  ~PrefixCache() override;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // A turn of `tenant` over `tokens`: the longest cached prefix of tokens[0, max_match) is
  // locked and read by the returned turn's sequence. reserve_rows: rows the turn will append
  // (prefill, reply, forks); cached prefixes are evicted until the pool has room for them, or
  // ResourceExhausted when in-flight turns hold it all.
  Result<std::unique_ptr<PrefixTurn>> Begin(std::string_view tenant,
                                            std::span<const int32_t> tokens, int64_t max_match,
                                            int64_t reserve_rows);

  // Evicts unlocked cached prefixes (least recently used first) for at least `bytes` of rows.
  size_t Evict(size_t bytes);
  PrefixCacheStats stats() const;
  size_t budget_bytes() const { return budget_; }
  // Tests: the pool, and the tree walks so far (RadixTree::nodes_visited).
  kv::KvPool* pool() { return &pool_; }
  int64_t nodes_visited() const;

 private:
  friend class PrefixTurn;
  void Release(std::span<const kv::RowRef> rows) override;  // under mu_
  void Commit(PrefixTurn& turn, std::span<const int32_t> tokens);
  void Abort(PrefixTurn& turn);
  // Evicts until the tree's blocks fit the budget (under mu_).
  void EnforceBudgetLocked();

  const size_t budget_;
  mutable std::mutex mu_;
  kv::KvPool pool_;
  std::vector<int32_t> held_;  // (pool max_blocks) rows of each block the tree holds
  int64_t blocks_held_ = 0;
  int64_t budget_blocks_ = 0;
  int64_t turns_ = 0;
  RadixTree tree_;  // last: destroyed first, releasing its rows into held_ and the pool
};

}  // namespace kvmem::memory::prefix
