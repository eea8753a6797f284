// A radix tree over token ids whose nodes hold, per token, the KV row (block, row) of a pool that
// was computed for that token at that position: the prefix cache of requests that name no agent
// (after sglang's radix_cache.py). A lookup finds the longest cached prefix of a token list; an
// insert adds a finished turn's rows; least recently used unlocked leaves are evicted under a
// byte budget.
//
// Tenants: the tree's first level is the tenant. Every lookup and insert names one and walks
// only that tenant's subtree, so tenant B never matches rows tenant A computed, and B's miss
// costs the same whether or not A cached the prefix (nodes_visited() counts the nodes walked).
//
// Ownership: the tree holds rows it was given by Insert and gives them back through RowOwner
// when it evicts them or is destroyed. It never reads or writes KV data, so tests build it over
// a simulated pool.
//
// Locks: Lock(node) marks the path from node to the root as in use (a turn reads those rows);
// a node with a non-zero lock count is never evicted. Node handles stay valid while locked
// (splitting a node keeps the handle on the deeper part, which keeps its rows).
//
// Thread-safety: not thread-safe; the owner (PrefixCache) serializes every call with one mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_pool.h"

namespace kvmem::memory::prefix {

// Where rows the tree lets go of are returned (the pool glue frees a block once no row of it
// is held).
class RowOwner {
 public:
  virtual ~RowOwner() = default;
  virtual void Release(std::span<const kv::RowRef> rows) = 0;
};

// One node: an edge of tokens and their rows. Opaque to callers except as a Lock handle.
struct RadixNode {
  std::vector<int32_t> tokens;   // the edge from the parent
  std::vector<kv::RowRef> rows;  // (tokens.size())
  RadixNode* parent = nullptr;
  std::map<int32_t, std::unique_ptr<RadixNode>> children;  // by first token of their edge
  int lock = 0;              // turns reading this node or one below it
  uint64_t last_access = 0;  // tree clock at the last match or insert through it
  int64_t hits = 0;          // matches that read it
  std::string tenant;        // tenant roots only (depth 1)
};

// What an eviction strategy ranks: an unlocked leaf.
struct EvictionCandidate {
  uint64_t last_access = 0;
  int64_t hits = 0;
  int64_t tokens = 0;
};

// Which evictable leaf goes first: the lowest priority. Small objects so a policy other than LRU
// (sglang also has LFU) is one more class.
class EvictionStrategy {
 public:
  virtual ~EvictionStrategy() = default;
  virtual double Priority(const EvictionCandidate& c) const = 0;
};

// Least recently used first.
class LruEviction final : public EvictionStrategy {
 public:
  double Priority(const EvictionCandidate& c) const override {
    return static_cast<double>(c.last_access);
  }
};

struct PrefixMatch {
  int64_t length = 0;            // tokens matched
  std::vector<kv::RowRef> rows;  // (length) their rows, in token order
  RadixNode* node = nullptr;     // the deepest node matched (the tenant root when none): Lock
};

struct RadixStats {
  int64_t lookups = 0;        // MatchPrefix calls
  int64_t lookup_tokens = 0;  // tokens asked for, all lookups
  int64_t hit_tokens = 0;     // tokens matched, all lookups
  int64_t evictions = 0;      // leaves evicted
  int64_t evicted_tokens = 0;
  int64_t tokens = 0;  // rows held now
  int64_t bytes = 0;   // tokens * bytes_per_token
  int64_t nodes = 0;   // nodes below the tenant roots
};

class RadixTree {
 public:
  // owner outlives the tree; bytes_per_token > 0 is what one held row costs; budget_bytes bounds
  // what Insert keeps (0: no bound). strategy null: LRU.
  RadixTree(RowOwner* owner, size_t bytes_per_token, size_t budget_bytes,
            std::unique_ptr<EvictionStrategy> strategy = nullptr);
  ~RadixTree();
  RadixTree(const RadixTree&) = delete;
  RadixTree& operator=(const RadixTree&) = delete;

  // The longest cached prefix of `tokens` in tenant's subtree. A match that ends inside an edge
  // splits that node there, so the returned node covers exactly the match.
  PrefixMatch MatchPrefix(std::string_view tenant, std::span<const int32_t> tokens);

  // Adds tokens[i] -> rows[i] (same length) to tenant's subtree. Returns how many leading tokens
  // were already present: the tree keeps its own rows for those, and the caller still owns (and
  // must release) rows[0, returned); the tree owns rows[returned, n) from now on. Evicts
  // (unlocked, least recently used first) while over the budget afterwards.
  int64_t Insert(std::string_view tenant, std::span<const int32_t> tokens,
                 std::span<const kv::RowRef> rows);

  // +1 / -1 on node and every ancestor. node: a handle from MatchPrefix (null is a no-op).
  void Lock(RadixNode* node);
  void Unlock(RadixNode* node);

  // Evicts unlocked leaves in strategy order until at least `bytes` were freed or nothing is
  // evictable. Returns the bytes freed.
  size_t Evict(size_t bytes);

  RadixStats stats() const;
  // Nodes the lookups and inserts walked so far (tenant roots included): the cost measure of
  // the tenant-isolation tests.
  int64_t nodes_visited() const { return visited_; }
  size_t bytes_per_token() const { return bytes_per_token_; }
  size_t budget_bytes() const { return budget_; }
  // Bytes held by locked nodes (not evictable now).
  size_t locked_bytes() const;

 private:
  RadixNode* TenantRoot(std::string_view tenant, bool create);
  // Splits node's edge after `at` tokens (0 < at < size): a new node takes the first part.
  RadixNode* Split(RadixNode* node, size_t at);
  void ReleaseSubtree(RadixNode* node);
  bool IsTenantRoot(const RadixNode* n) const { return n->parent == &root_; }

  RowOwner* owner_;
  size_t bytes_per_token_;
  size_t budget_;
  std::unique_ptr<EvictionStrategy> strategy_;
  RadixNode root_;  // the parent of every tenant root (they live in tenants_)
  std::map<std::string, std::unique_ptr<RadixNode>, std::less<>> tenants_;
  uint64_t clock_ = 0;
  int64_t visited_ = 0;
  RadixStats stats_;
};

}  // namespace kvmem::memory::prefix
