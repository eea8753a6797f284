#include "memory/prefix/prefix_cache.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace kvmem::memory::prefix {
namespace {

kv::KvGeometry WithBlockRows(kv::KvGeometry g) {
  g.block_rows = PrefixCache::kBlockRows;
  return g;
}

int64_t BudgetBlocks(const kv::KvGeometry& g, const kv::KvFormats& formats, size_t budget) {
  const size_t per_block = kv::KvPool(WithBlockRows(g), 0, formats).bytes_per_block();
  return std::max<int64_t>(1, static_cast<int64_t>((budget + per_block - 1) / per_block));
}

}  // namespace

PrefixTurn::PrefixTurn(PrefixCache* cache, std::string tenant, RadixNode* node,
                       std::vector<kv::RowRef> rows, std::unique_ptr<kv::KvSequence> seq)
    : cache_(cache),
      tenant_(std::move(tenant)),
      node_(node),
      rows_(std::move(rows)),
      seq_(std::move(seq)) {}

PrefixTurn::~PrefixTurn() { Abort(); }

void PrefixTurn::Commit(std::span<const int32_t> tokens) {
  if (cache_ != nullptr) cache_->Commit(*this, tokens);
}

void PrefixTurn::Abort() {
  if (cache_ != nullptr) cache_->Abort(*this);
}

PrefixCache::PrefixCache(kv::KvGeometry geometry, kv::KvFormats formats, size_t budget_bytes,
                         int room_blocks)
    : budget_(budget_bytes),
      pool_(WithBlockRows(geometry),
            static_cast<int>(BudgetBlocks(geometry, formats, budget_bytes) + room_blocks), formats),
      held_(static_cast<size_t>(pool_.max_blocks()), 0),
      budget_blocks_(BudgetBlocks(geometry, formats, budget_bytes)),
      tree_(this, pool_.bytes_per_token(), budget_bytes) {}

PrefixCache::~PrefixCache() = default;

Result<std::unique_ptr<PrefixTurn>> PrefixCache::Begin(std::string_view tenant,
                                                       std::span<const int32_t> tokens,
                                                       int64_t max_match, int64_t reserve_rows) {
  const auto n_match =
      static_cast<size_t>(std::clamp<int64_t>(max_match, 0, static_cast<int64_t>(tokens.size())));
  std::lock_guard<std::mutex> lock(mu_);
  PrefixMatch m = tree_.MatchPrefix(tenant, tokens.first(n_match));
  tree_.Lock(m.node);
  // Room for the turn's own rows (one more block: they start in a fresh one). Turns that began
  // earlier may still take blocks they did not have yet, so this is a best effort; a turn that
  // finds the pool full fails with the pool's ResourceExhausted.
  const int64_t need = (std::max<int64_t>(reserve_rows, 0) + kBlockRows - 1) / kBlockRows + 1;
  while (pool_.max_blocks() - pool_.blocks_in_use() < need) {
    if (tree_.Evict(pool_.bytes_per_token() * kBlockRows) == 0) {
      tree_.Unlock(m.node);
      return ResourceExhausted("prefix cache pool: no room for a turn of " +
                               std::to_string(reserve_rows) + " rows beside the turns in flight");
    }
  }
  ++turns_;
  auto seq = std::make_unique<kv::KvSequence>(&pool_);
  seq->set_window_release(false);  // rows in this pool may be read by later turns
  seq->ReadShared(m.rows, 0);
  return std::unique_ptr<PrefixTurn>(
      new PrefixTurn(this, std::string(tenant), m.node, std::move(m.rows), std::move(seq)));
}

void PrefixCache::Commit(PrefixTurn& turn, std::span<const int32_t> tokens) {
  kv::KvSequence& seq = *turn.seq_;
  const int64_t matched = turn.matched();
  const int64_t own = seq.n_rows();
  assert(static_cast<int64_t>(tokens.size()) == matched + own);
  std::vector<kv::RowRef> rows = turn.rows_;
  rows.reserve(static_cast<size_t>(matched + own));
  for (int64_t i = 0; i < own; ++i) rows.push_back(kv::RowAt(seq, i));
  const std::vector<int32_t> blocks = seq.TakeBlocks();
  std::lock_guard<std::mutex> lock(mu_);
  // Every own row counts as held first, so rows the tree releases at once (duplicates, an
  // eviction inside Insert) are counted down like any other.
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int64_t in_block =
        std::min<int64_t>(kBlockRows, own - static_cast<int64_t>(i) * kBlockRows);
    if (in_block <= 0) {
      pool_.Free(blocks[i]);
      continue;
    }
    held_[static_cast<size_t>(blocks[i])] = static_cast<int32_t>(in_block);
    ++blocks_held_;
  }
  const size_t n = std::min(tokens.size(), rows.size());
  const int64_t present = tree_.Insert(turn.tenant_, tokens.first(n), std::span(rows).first(n));
  // The matched prefix is locked, so the tree still has it: present >= matched. Own rows of
  // tokens another turn inserted meanwhile are duplicates.
  assert(present >= matched);
  if (present > matched) {
    Release(std::span(rows).subspan(static_cast<size_t>(matched),
                                    static_cast<size_t>(present - matched)));
  }
  tree_.Unlock(turn.node_);
  --turns_;
  turn.cache_ = nullptr;
  turn.node_ = nullptr;
  EnforceBudgetLocked();
}

void PrefixCache::Abort(PrefixTurn& turn) {
  turn.seq_.reset();  // frees the turn's own blocks
  std::lock_guard<std::mutex> lock(mu_);
  tree_.Unlock(turn.node_);
  --turns_;
  turn.cache_ = nullptr;
  turn.node_ = nullptr;
}

void PrefixCache::Release(std::span<const kv::RowRef> rows) {
  for (const kv::RowRef& r : rows) {
    int32_t& h = held_[static_cast<size_t>(r.block)];
    assert(h > 0);
    if (--h == 0) {
      pool_.Free(r.block);
      --blocks_held_;
    }
  }
}

void PrefixCache::EnforceBudgetLocked() {
  while (blocks_held_ > budget_blocks_ && tree_.Evict(pool_.bytes_per_token() * kBlockRows) > 0) {
  }
}

size_t PrefixCache::Evict(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return tree_.Evict(bytes);
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixCacheStats s;
  s.tree = tree_.stats();
  s.blocks_held = blocks_held_;
  s.bytes_held = blocks_held_ * static_cast<int64_t>(pool_.bytes_per_block());
  s.turns = turns_;
  return s;
}

int64_t PrefixCache::nodes_visited() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tree_.nodes_visited();
}

}  // namespace kvmem::memory::prefix
