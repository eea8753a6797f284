#include "memory/intent/slot_map_eviction.h"

#include <algorithm>
#include <numeric>

namespace kvmem::memory {

std::vector<int64_t> TopScored(std::span<const int64_t> candidates, std::span<const double> scores,
                               int64_t n_keep) {
  if (static_cast<int64_t>(candidates.size()) <= n_keep) {
    return {candidates.begin(), candidates.end()};
  }
  std::vector<int64_t> order(candidates.begin(), candidates.end());
  const auto higher = [&](int64_t a, int64_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a > b;  // ties: the more recent
  };
  const int64_t n = std::max<int64_t>(n_keep, 0);
  std::nth_element(order.begin(), order.begin() + n, order.end(), higher);
  order.resize(static_cast<size_t>(n));
  std::sort(order.begin(), order.end());
  return order;
}

void KillRows(std::span<const int64_t> rows, kv::KvSequence* seq) {
  const int br = seq->pool()->geometry().block_rows;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    // A run of consecutive indices inside one block.
    while (j < rows.size() && rows[j] == rows[j - 1] + 1 && rows[j] % br != 0) ++j;
    seq->view().Kill(kv::RowAt(*seq, rows[i]), static_cast<int>(j - i));
    i = j;
  }
}

std::vector<size_t> FreeableBlocks(const kv::KvSequence& seq, std::span<const uint8_t> live,
                                   int64_t protected_rows, std::span<const kv::RowRef> shared) {
  const kv::KvPool& pool = *seq.pool();
  const int br = pool.geometry().block_rows;
  const int64_t n = seq.n_rows();
  std::vector<size_t> out;
  if (n == 0) return out;
  const size_t append_block = static_cast<size_t>((n - 1) / br) + (n % br == 0 ? 1 : 0);
  for (size_t b = 1; b < seq.blocks().size() && b < append_block; ++b) {
    const int64_t first = static_cast<int64_t>(b) * br, end = std::min(n, first + br);
    if (first < protected_rows) continue;  // (a)
    bool holds = false;
    for (int l = 0; l < pool.geometry().n_layers && !holds; ++l) {
      holds = pool.has_layer(seq.blocks()[b], l);
    }
    if (!holds) continue;  // (b)
    bool dead = true;
    for (int64_t i = first; i < end && dead; ++i) dead = live[static_cast<size_t>(i)] == 0;
    if (!dead) continue;  // (c) a kept row
    const int32_t block = seq.blocks()[b];
    const bool aliased = std::any_of(shared.begin(), shared.end(),
                                     [&](const kv::RowRef& r) { return r.block == block; });
    if (aliased) continue;  // (c) a sibling's
    out.push_back(b);
  }
  return out;
}

void FreeBlocks(std::span<const size_t> blocks, kv::KvSequence* seq) {
  for (size_t b : blocks) {
    for (int l = 0; l < seq->pool()->geometry().n_layers; ++l) seq->ReleaseStorage(b, l);
  }
}

Result<std::unique_ptr<kv::KvSequence>> CompactRows(const kv::KvSequence& seq,
                                                    std::span<const int64_t> kept,
                                                    const std::vector<kv::RopeSpec>& rope) {
  kv::KvPool* pool = seq.pool();
  const kv::KvGeometry& g = pool->geometry();
  auto out = std::make_unique<kv::KvSequence>(pool);
  out->set_window_release(false);
  if (kept.empty()) return out;
  KVMEM_ASSIGN_OR_RETURN(std::vector<kv::RowRef> dst,
                         out->AppendRows(static_cast<int>(kept.size()), 0));
  std::vector<float> k(static_cast<size_t>(g.n_kv_heads) * g.head_dim_k);
  std::vector<float> v(static_cast<size_t>(g.n_kv_heads) * g.head_dim_v);
  for (size_t j = 0; j < kept.size(); ++j) {
    const kv::RowRef src = kv::RowAt(seq, kept[j]);
    for (int l = 0; l < g.n_layers; ++l) {
      if (pool->has_layer(src.block, l) && src.row < pool->written_rows(src.block, l)) {
        pool->ReadToken(src, l, k.data(), v.data());
      } else {
        // A layer whose storage was given back (rows out of a sliding window): nothing reads it
        // at the old position; the copy holds zeros, as a masked row would contribute.
        std::fill(k.begin(), k.end(), 0.0f);
        std::fill(v.begin(), v.end(), 0.0f);
      }
      pool->WriteToken(dst[j], l, k.data(), v.data());
    }
    pool->set_rotated_pos(dst[j], pool->rotated_pos(src));
  }
  // Re-rotated per block (Reposition turns each row by its own position difference).
  for (size_t i = 0; i < kept.size();) {
    size_t j = i + 1;
    while (j < kept.size() && dst[j].block == dst[i].block) ++j;
    pool->Reposition(dst[i], static_cast<int>(j - i), static_cast<int64_t>(i), rope);
    i = j;
  }
  return out;
}

}  // namespace kvmem::memory
