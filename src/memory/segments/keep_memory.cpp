#include "memory/segments/keep_memory.h"

#include <algorithm>
#include <numeric>

#include "engine/forward.h"
#include "memory/episodic/episodes.h"
#include "memory/segments/segment_rows.h"

namespace kvmem::memory::segments {

namespace {

float Dot(std::span<const float> a, std::span<const float> b) {
  float s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

KeepMemory::KeepMemory(const model::Model& model, ThreadPool* threads, kv::KvPool* pool,
                       KeepConfig config)
    : model_(model), threads_(threads), pool_(pool), config_(config) {}

KeepMemory::~KeepMemory() = default;

int KeepMemory::Index(std::string_view name) const {
  for (size_t i = 0; i < segments_.size(); ++i) {
    if (segments_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

Result<std::shared_ptr<KeepMemory::Cache>> KeepMemory::Encode(std::span<const int32_t> tokens) {
  if (!prefix_rows_) return FailedPrecondition("KEEP memory has no prefix yet (SetPrefix)");
  const auto prefix_len = static_cast<int64_t>(prefix_tokens_.size());
  KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<kv::KvSequence> rows,
                         EncodeAfter(model_, threads_, *prefix_rows_, prefix_len, tokens));
  // Packed after the other caches: a sequence of its own would take a block per segment.
  if (!packed_) {
    packed_ = std::make_shared<kv::KvSequence>(pool_);
    packed_->set_window_release(false);
  }
  auto cache = std::make_shared<Cache>();
  cache->rows = packed_;
  cache->first_row = packed_->n_rows();
  KVMEM_RETURN_IF_ERROR(AppendPlaced(model_, *rows, 0, static_cast<int64_t>(tokens.size()),
                                     packed_.get(), prefix_len));
  encoded_.tokens += static_cast<int64_t>(tokens.size());
  encoded_.units += 1;
  return cache;
}

std::vector<std::pair<std::shared_ptr<KeepMemory::Cache>, int64_t>> KeepMemory::LiveCaches() const {
  std::vector<std::pair<std::shared_ptr<Cache>, int64_t>> live;
  for (const Segment& s : segments_) {
    if (s.cache) live.emplace_back(s.cache, static_cast<int64_t>(s.tokens.size()));
  }
  for (const Group& g : groups_) {
    if (!g.cache) continue;
    int64_t n = 0;
    for (int m : g.members)
      n += static_cast<int64_t>(segments_[static_cast<size_t>(m)].tokens.size());
    live.emplace_back(g.cache, n);
  }
  return live;
}

void KeepMemory::Compact() {
  if (!packed_) return;
  const auto live = LiveCaches();
  int64_t live_rows = 0;
  for (const auto& [c, n] : live) live_rows += n;
  const int block = pool_->geometry().block_rows;
  if (packed_->n_rows() <= 2 * live_rows + block) return;
  auto fresh = std::make_shared<kv::KvSequence>(pool_);
  fresh->set_window_release(false);
  std::vector<int64_t> first;
  const auto prefix_len = static_cast<int64_t>(prefix_tokens_.size());
  for (const auto& [c, n] : live) {
    first.push_back(fresh->n_rows());
    // Out of pool memory: keep the old packing, which is whole.
    if (!AppendPlaced(model_, *c->rows, c->first_row, n, fresh.get(), prefix_len).ok()) return;
  }
  for (size_t i = 0; i < live.size(); ++i) {
    live[i].first->rows = fresh;
    live[i].first->first_row = first[i];
  }
  packed_ = std::move(fresh);
}

Status KeepMemory::SetPrefix(std::span<const int32_t> tokens) {
  if (tokens.empty()) return InvalidArgument("a KEEP prefix needs at least one token");
  if (prefix_rows_ &&
      std::equal(tokens.begin(), tokens.end(), prefix_tokens_.begin(), prefix_tokens_.end())) {
    return Status::Ok();
  }
  auto rows = std::make_unique<kv::KvSequence>(pool_);
  rows->set_window_release(false);
  std::vector<float> unused;
  KVMEM_RETURN_IF_ERROR(engine::Forward(model_, threads_, rows.get(), tokens, 0, false, &unused));
  prefix_rows_ = std::move(rows);
  prefix_tokens_.assign(tokens.begin(), tokens.end());
  // Every cache was computed after the old prefix.
  for (Segment& s : segments_) s.cache.reset();
  packed_.reset();
  for (Group& g : groups_) {
    g.cache.reset();
    g.is_static = false;
  }
  return Status::Ok();
}

Status KeepMemory::Put(std::string_view name, std::string_view text, std::vector<int32_t> tokens,
                       std::vector<float> embedding) {
  if (tokens.empty()) return InvalidArgument("segment '" + std::string(name) + "' has no tokens");
  // The new cache first: an error leaves everything as it was.
  KVMEM_ASSIGN_OR_RETURN(std::shared_ptr<Cache> cache, Encode(tokens));
  const int i = Index(name);
  Segment* s = nullptr;
  if (i < 0) {
    segments_.push_back(Segment{std::string(name), "", {}, {}, 0, -1, nullptr});
    s = &segments_.back();
    // A late segment joins the group of the nearest centroid.
    if (grouped_ && !embedding.empty()) {
      float best = -2;
      for (size_t g = 0; g < groups_.size(); ++g) {
        const float c = Dot(embedding, groups_[g].centroid);
        if (c > best) {
          best = c;
          s->group = static_cast<int>(g);
        }
      }
    }
  } else {
    s = &segments_[static_cast<size_t>(i)];
  }
  // Its static group goes dynamic: the others get caches of their own first.
  if (s->group >= 0) {
    Status st = MakeDynamic(&groups_[static_cast<size_t>(s->group)], Index(name));
    if (!st.ok()) {
      if (i < 0) segments_.pop_back();
      return st;
    }
  }
  s->text.assign(text);
  s->tokens = std::move(tokens);
  s->embedding = std::move(embedding);
  s->changed_step = step_;
  s->cache = std::move(cache);
  Compact();
  return Status::Ok();
}

Status KeepMemory::Remove(std::string_view name) {
  const int i = Index(name);
  if (i < 0) return NotFound("no segment named '" + std::string(name) + "'");
  const int g = segments_[static_cast<size_t>(i)].group;
  // Its static group goes dynamic: the others get caches of their own first.
  if (g >= 0) KVMEM_RETURN_IF_ERROR(MakeDynamic(&groups_[static_cast<size_t>(g)], i));
  segments_.erase(segments_.begin() + i);
  for (Group& gr : groups_) {
    // Indices past i moved down (the removed one's group is dynamic now, its list empty).
    for (int& m : gr.members) {
      if (m > i) --m;
    }
  }
  if (g >= 0) {
    // The removal is a change of the group: it stays dynamic for t steps.
    for (Segment& s : segments_) {
      if (s.group == g) s.changed_step = std::max(s.changed_step, step_);
    }
  }
  Compact();
  return Status::Ok();
}

Status KeepMemory::MakeDynamic(Group* g, int skip) {
  if (!g->is_static) return Status::Ok();
  // Each member gets a cache of its own before the joint one goes.
  const int gi = static_cast<int>(g - groups_.data());
  std::vector<std::pair<int, std::shared_ptr<Cache>>> made;
  for (size_t j = 0; j < segments_.size(); ++j) {
    if (segments_[j].group != gi || segments_[j].cache || static_cast<int>(j) == skip) continue;
    KVMEM_ASSIGN_OR_RETURN(std::shared_ptr<Cache> c, Encode(segments_[j].tokens));
    made.emplace_back(static_cast<int>(j), std::move(c));
  }
  for (auto& [j, c] : made) segments_[static_cast<size_t>(j)].cache = std::move(c);
  g->is_static = false;
  g->cache.reset();
  g->members.clear();
  return Status::Ok();
}

Status KeepMemory::GroupSegments() {
  if (grouped_ || !config_.static_dynamic || segments_.empty()) return Status::Ok();
  const size_t dim = segments_[0].embedding.size();
  if (dim == 0) return Status::Ok();  // no embeddings: every segment stays a unit of its own
  std::vector<float> all;
  for (const Segment& s : segments_) {
    if (s.embedding.size() != dim) return InvalidArgument("segment embeddings differ in size");
    all.insert(all.end(), s.embedding.begin(), s.embedding.end());
  }
  const int n = static_cast<int>(segments_.size());
  const int k = std::max(1, (n + config_.group_size - 1) / config_.group_size);
  const Episodes e = ClusterEpisodes(all, n, static_cast<int>(dim), k, /*seed=*/1);
  groups_.assign(static_cast<size_t>(e.k), Group{});
  for (int g = 0; g < e.k; ++g) {
    const std::span<const float> c = e.centroid(g);
    groups_[g].centroid.assign(c.begin(), c.end());
  }
  for (int i = 0; i < n; ++i) segments_[i].group = e.assignment[i];
  grouped_ = true;
  return Status::Ok();
}

bool KeepMemory::QuietFor(const Group& g) const {
  const int gi = static_cast<int>(&g - groups_.data());
  bool any = false;
  for (const Segment& s : segments_) {
    if (s.group != gi) continue;
    any = true;
    if (step_ - s.changed_step < config_.static_after) return false;
  }
  return any;
}

Status KeepMemory::Refresh() {
  KVMEM_RETURN_IF_ERROR(GroupSegments());
  for (size_t g = 0; g < groups_.size(); ++g) {
    Group& gr = groups_[g];
    if (!config_.static_dynamic || !QuietFor(gr)) {
      KVMEM_RETURN_IF_ERROR(MakeDynamic(&gr));
      continue;
    }
    std::vector<int> members;
    for (size_t j = 0; j < segments_.size(); ++j) {
      if (segments_[j].group == static_cast<int>(g)) members.push_back(static_cast<int>(j));
    }
    if (gr.is_static && gr.cache && members == gr.members) continue;
    std::vector<int32_t> tokens;
    for (int j : members) {
      const auto& t = segments_[static_cast<size_t>(j)].tokens;
      tokens.insert(tokens.end(), t.begin(), t.end());
    }
    KVMEM_ASSIGN_OR_RETURN(gr.cache, Encode(tokens));
    gr.is_static = true;
    gr.members = std::move(members);
    for (int j : gr.members) segments_[static_cast<size_t>(j)].cache.reset();
  }
  // Segments outside any static group need a cache of their own (a new prefix dropped them).
  for (Segment& s : segments_) {
    if (s.cache || (s.group >= 0 && groups_[static_cast<size_t>(s.group)].is_static)) continue;
    KVMEM_ASSIGN_OR_RETURN(s.cache, Encode(s.tokens));
  }
  Compact();
  return Status::Ok();
}

std::vector<PlacedSegment> KeepMemory::Retrieve(std::span<const float> query_embedding,
                                                std::vector<int>* order) const {
  // Units: a static group (its members) or one segment.
  struct Unit {
    std::vector<int> members;
    float score = 0;
  };
  std::vector<Unit> units;
  std::vector<int> unit_of_group(groups_.size(), -1);
  for (size_t j = 0; j < segments_.size(); ++j) {
    const Segment& s = segments_[j];
    const float score = query_embedding.empty() ? 0.0f : Dot(query_embedding, s.embedding);
    if (s.group >= 0 && groups_[static_cast<size_t>(s.group)].is_static) {
      int& u = unit_of_group[static_cast<size_t>(s.group)];
      if (u < 0) {
        u = static_cast<int>(units.size());
        units.push_back({{}, -2.0f});
      }
      units[u].members.push_back(static_cast<int>(j));
      units[u].score = std::max(units[u].score, score);
    } else {
      units.push_back({{static_cast<int>(j)}, score});
    }
  }
  std::vector<int> chosen(units.size());
  std::iota(chosen.begin(), chosen.end(), 0);
  if (config_.top_k > 0 && !query_embedding.empty()) {
    std::stable_sort(chosen.begin(), chosen.end(),
                     [&](int a, int b) { return units[a].score > units[b].score; });
    size_t covered = 0, n = 0;
    while (n < chosen.size() && covered < static_cast<size_t>(config_.top_k))
      covered += units[chosen[n++]].members.size();
    chosen.resize(n);
    // Memory order: by each unit's first segment.
    std::sort(chosen.begin(), chosen.end(),
              [&](int a, int b) { return units[a].members[0] < units[b].members[0]; });
  }
  std::vector<PlacedSegment> placed;
  order->clear();
  for (int u : chosen) {
    for (int j : units[u].members) {
      const Segment& s = segments_[static_cast<size_t>(j)];
      PlacedSegment p;
      if (s.cache) {
        p.cache = s.cache->rows.get();
        p.first_row = s.cache->first_row;
      } else {
        // A static group's member: its rows inside the joint cache.
        const Group& g = groups_[static_cast<size_t>(s.group)];
        int64_t offset = g.cache->first_row;
        for (int m : g.members) {
          if (m == j) break;
          offset += static_cast<int64_t>(segments_[static_cast<size_t>(m)].tokens.size());
        }
        p.cache = g.cache->rows.get();
        p.first_row = offset;
      }
      p.tokens = s.tokens;
      placed.push_back(p);
      order->push_back(j);
    }
  }
  return placed;
}

Result<BlendResult> KeepMemory::Answer(std::span<const int32_t> query,
                                       std::span<const float> query_embedding) {
  KVMEM_RETURN_IF_ERROR(Refresh());
  std::vector<int> order;
  const std::vector<PlacedSegment> placed = Retrieve(query_embedding, &order);
  BlendOptions options;
  options.rule = config_.rule;
  options.ratio = config_.recompute_ratio;
  options.query_source = config_.query_source;
  options.debias = config_.debias;
  KVMEM_ASSIGN_OR_RETURN(
      BlendResult r, Blend(model_, threads_, *prefix_rows_,
                           static_cast<int64_t>(prefix_tokens_.size()), placed, query, options));
  last_read_.clear();
  for (int j : order) last_read_.push_back(segments_[static_cast<size_t>(j)].name);
  last_recomputed_.clear();
  for (int p : r.last_layer_segments)
    last_recomputed_.push_back(last_read_[static_cast<size_t>(p)]);
  return r;
}

std::vector<SegmentInfo> KeepMemory::List() const {
  std::vector<SegmentInfo> out;
  for (const Segment& s : segments_) {
    SegmentInfo i;
    i.name = s.name;
    i.text = s.text;
    i.group = s.group;
    i.is_static = s.group >= 0 && groups_[static_cast<size_t>(s.group)].is_static;
    i.changed_step = s.changed_step;
    i.tokens = static_cast<int64_t>(s.tokens.size());
    out.push_back(std::move(i));
  }
  return out;
}

std::optional<SegmentInfo> KeepMemory::Find(std::string_view name) const {
  const int i = Index(name);
  if (i < 0) return std::nullopt;
  return List()[static_cast<size_t>(i)];
}

int64_t KeepMemory::segment_tokens() const {
  int64_t n = 0;
  for (const Segment& s : segments_) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

EncodeCost KeepMemory::TakeEncoded() {
  EncodeCost c = encoded_;
  encoded_ = {};
  return c;
}

}  // namespace kvmem::memory::segments
