#include "memory/prefix/radix_tree.h"

#include <algorithm>
#include <cassert>
#include <queue>
#include <utility>

namespace kvmem::memory::prefix {
namespace {

size_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

RadixTree::RadixTree(RowOwner* owner, size_t bytes_per_token, size_t budget_bytes,
                     std::unique_ptr<EvictionStrategy> strategy)
    : owner_(owner),
      bytes_per_token_(bytes_per_token),
      budget_(budget_bytes),
      strategy_(strategy ? std::move(strategy) : std::make_unique<LruEviction>()) {
  assert(owner_ != nullptr && bytes_per_token_ > 0);
}

RadixTree::~RadixTree() {
  for (auto& [name, t] : tenants_) ReleaseSubtree(t.get());
}

void RadixTree::ReleaseSubtree(RadixNode* node) {
  if (!node->rows.empty()) owner_->Release(node->rows);
  for (auto& [first, child] : node->children) ReleaseSubtree(child.get());
}

RadixNode* RadixTree::TenantRoot(std::string_view tenant, bool create) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) return it->second.get();
  if (!create) return nullptr;
  auto t = std::make_unique<RadixNode>();
  t->parent = &root_;
  t->tenant = std::string(tenant);
  RadixNode* raw = t.get();
  tenants_.emplace(std::string(tenant), std::move(t));
  return raw;
}

RadixNode* RadixTree::Split(RadixNode* node, size_t at) {
  assert(at > 0 && at < node->tokens.size());
  RadixNode* parent = node->parent;
  auto head = std::make_unique<RadixNode>();
  head->tokens.assign(node->tokens.begin(), node->tokens.begin() + static_cast<ptrdiff_t>(at));
  head->rows.assign(node->rows.begin(), node->rows.begin() + static_cast<ptrdiff_t>(at));
  head->parent = parent;
  // The head is on the path of every lock below it: it inherits the node's count.
  head->lock = node->lock;
  head->last_access = node->last_access;
  head->hits = node->hits;
  node->tokens.erase(node->tokens.begin(), node->tokens.begin() + static_cast<ptrdiff_t>(at));
  node->rows.erase(node->rows.begin(), node->rows.begin() + static_cast<ptrdiff_t>(at));
  std::unique_ptr<RadixNode>& slot = parent->children[head->tokens.front()];
  std::unique_ptr<RadixNode> tail = std::move(slot);
  assert(tail.get() == node);
  tail->parent = head.get();
  head->children.emplace(tail->tokens.front(), std::move(tail));
  slot = std::move(head);
  ++stats_.nodes;
  return slot.get();
}

PrefixMatch RadixTree::MatchPrefix(std::string_view tenant, std::span<const int32_t> tokens) {
  ++stats_.lookups;
  stats_.lookup_tokens += static_cast<int64_t>(tokens.size());
  PrefixMatch m;
  ++visited_;  // the tenant level
  RadixNode* node = TenantRoot(tenant, /*create=*/false);
  if (node == nullptr) return m;
  const uint64_t now = ++clock_;
  node->last_access = now;
  size_t pos = 0;
  while (pos < tokens.size()) {
    auto it = node->children.find(tokens[pos]);
    if (it == node->children.end()) break;
    RadixNode* child = it->second.get();
    ++visited_;
    const size_t k = CommonPrefix(child->tokens, tokens.subspan(pos));
    const bool partial = k < child->tokens.size();
    if (partial) child = Split(child, k);
    m.rows.insert(m.rows.end(), child->rows.begin(), child->rows.end());
    pos += k;
    child->last_access = now;
    ++child->hits;
    node = child;
    if (partial) break;
  }
  m.length = static_cast<int64_t>(pos);
  m.node = node;
  stats_.hit_tokens += m.length;
  return m;
}

int64_t RadixTree::Insert(std::string_view tenant, std::span<const int32_t> tokens,
                          std::span<const kv::RowRef> rows) {
  assert(tokens.size() == rows.size());
  ++visited_;
  RadixNode* node = TenantRoot(tenant, /*create=*/true);
  const uint64_t now = ++clock_;
  node->last_access = now;
  size_t pos = 0;
  while (pos < tokens.size()) {
    auto it = node->children.find(tokens[pos]);
    if (it == node->children.end()) break;
    RadixNode* child = it->second.get();
    ++visited_;
    const size_t k = CommonPrefix(child->tokens, tokens.subspan(pos));
    if (k < child->tokens.size()) child = Split(child, k);
    child->last_access = now;
    pos += k;
    node = child;
  }
  if (pos < tokens.size()) {
    auto leaf = std::make_unique<RadixNode>();
    leaf->tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(pos), tokens.end());
    leaf->rows.assign(rows.begin() + static_cast<ptrdiff_t>(pos), rows.end());
    leaf->parent = node;
    leaf->last_access = now;
    stats_.tokens += static_cast<int64_t>(leaf->tokens.size());
    ++stats_.nodes;
    node->children.emplace(leaf->tokens.front(), std::move(leaf));
  }
  const size_t held = static_cast<size_t>(stats_.tokens) * bytes_per_token_;
  if (budget_ > 0 && held > budget_) Evict(held - budget_);
  return static_cast<int64_t>(pos);
}

void RadixTree::Lock(RadixNode* node) {
  for (; node != nullptr && node != &root_; node = node->parent) ++node->lock;
}

void RadixTree::Unlock(RadixNode* node) {
  for (; node != nullptr && node != &root_; node = node->parent) {
    assert(node->lock > 0);
    --node->lock;
  }
}

size_t RadixTree::Evict(size_t bytes) {
  using Entry = std::pair<double, RadixNode*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  auto consider = [&](RadixNode* n) {
    if (IsTenantRoot(n) || !n->children.empty() || n->lock > 0) return;
    heap.emplace(
        strategy_->Priority({n->last_access, n->hits, static_cast<int64_t>(n->tokens.size())}), n);
  };
  // The leaves: every node without children, found by walking each tenant's subtree.
  std::vector<RadixNode*> stack;
  for (auto& [name, t] : tenants_) stack.push_back(t.get());
  while (!stack.empty()) {
    RadixNode* n = stack.back();
    stack.pop_back();
    consider(n);
    for (auto& [first, child] : n->children) stack.push_back(child.get());
  }
  size_t freed = 0;
  while (freed < bytes && !heap.empty()) {
    RadixNode* leaf = heap.top().second;
    heap.pop();
    owner_->Release(leaf->rows);
    const auto n = static_cast<int64_t>(leaf->tokens.size());
    freed += static_cast<size_t>(n) * bytes_per_token_;
    stats_.tokens -= n;
    stats_.evicted_tokens += n;
    ++stats_.evictions;
    --stats_.nodes;
    RadixNode* parent = leaf->parent;
    const int32_t first = leaf->tokens.front();  // the key outlives the node it names
    parent->children.erase(first);               // destroys leaf
    if (!IsTenantRoot(parent)) {
      consider(parent);
    } else if (parent->children.empty() && parent->lock == 0) {
      const std::string tenant = parent->tenant;
      tenants_.erase(tenant);
    }
  }
  return freed;
}

size_t RadixTree::locked_bytes() const {
  int64_t tokens = 0;
  std::vector<const RadixNode*> stack;
  for (const auto& [name, t] : tenants_) stack.push_back(t.get());
  while (!stack.empty()) {
    const RadixNode* n = stack.back();
    stack.pop_back();
    if (n->lock > 0) tokens += static_cast<int64_t>(n->tokens.size());
    for (const auto& [first, child] : n->children) stack.push_back(child.get());
  }
  return static_cast<size_t>(tokens) * bytes_per_token_;
}

RadixStats RadixTree::stats() const {
  RadixStats s = stats_;
  s.bytes = s.tokens * static_cast<int64_t>(bytes_per_token_);
  return s;
}

}  // namespace kvmem::memory::prefix
