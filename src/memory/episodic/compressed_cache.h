// A fixed-budget KV cache built by block prefill (EpiCache §2.2-2.3, papers/epicache.txt): for
// every layer and KV head, the rows of a history it kept, each still read at the position it was
// computed at (keys stay rotated there). Rows are kept per (layer, KV head), so one pool row no
// longer holds one token: the cache lives in a *region* of a sequence, `capacity` consecutive
// rows whose row j holds, in layer l and KV head g, the j-th kept row of (l, g) (its K and V
// copied there), read at position pos(l, g)[j]. Rows j >= pos(l, g).size() hold zeros or stale
// rows and are never read. A sequence may hold several regions (one per episode) and plain rows
// after them (a tail not yet compressed, a turn being answered).
//
//   CompressedCache c = AllocateRegion(&seq, capacity);   // capacity zero rows appended
//   SetView(c, &seq, tail_first);  // each (l, g) reads its kept rows, then rows tail_first..
//
// block_compression.h fills a region. Thread-safety: values and functions over one sequence;
// not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/kv_sequence.h"
#include "memory/policy/memory_policy.h"

namespace kvmem::memory {

struct CompressedCache {
  int n_layers = 0;
  int n_kv_heads = 0;
  int64_t first_row = 0;  // the region: storage rows [first_row, first_row + capacity)
  int64_t capacity = 0;
  // (n_layers * n_kv_heads) the positions of the kept rows, ascending; slot j of (l, g) holds
  // the row computed at pos[l * n_kv_heads + g][j].
  std::vector<std::vector<int64_t>> pos;
  int64_t next_pos = 0;  // the position after the history compressed into it

  const std::vector<int64_t>& of(int l, int g) const {
    return pos[static_cast<size_t>(l) * n_kv_heads + g];
  }
  std::vector<int64_t>& of(int l, int g) { return pos[static_cast<size_t>(l) * n_kv_heads + g]; }
  // Rows (l, g) reads at most over the KV heads of layer l.
  int64_t layer_rows(int l) const;
  // Kept rows summed over layers and KV heads.
  int64_t total_rows() const;
};

// Storage index of each block of seq's (block id -> index of its first row; -1 elsewhere).
std::vector<int64_t> BlockFirstRows(const kv::KvSequence& seq);

// Appends `capacity` rows to seq, zero in every layer, as an empty cache's region. With
// layer_rows (n_layers), the rows each layer can keep: the region starts and ends at block
// boundaries (capacity rounded up; InvalidArgument when seq does not end at one) and each layer
// gives back the storage of the region's blocks past its rows (KvSequence::ReleaseStorage), so a
// layer with a small budget or a short window costs what it keeps.
Result<CompressedCache> AllocateRegion(kv::KvSequence* seq, int64_t capacity,
                                       std::span<const int64_t> layer_rows = {});

// seq's view becomes, for each (l, g): the cache's kept rows at their positions, then the plain
// rows [tail_first, seq->n_rows()) at the positions their keys were rotated at. Rows appended
// later (a forward pass) join every list.
void SetView(const CompressedCache& c, kv::KvSequence* seq, int64_t tail_first);

// The cache's positions as the agent store keeps them: per (l, g) the count, then the gaps
// between successive positions, unsigned LEB128, base64. Decode checks everything against the
// geometry and the capacity (Corrupt naming what is wrong).
std::string EncodePositions(const CompressedCache& c);
Status DecodePositions(std::string_view text, CompressedCache* c);

}  // namespace kvmem::memory
