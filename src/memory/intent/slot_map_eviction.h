// IntentKV's eviction substrate (intentkv.txt §3.4) and the classic one it is measured against,
// over a sequence whose rows are named by storage index (row i of a KvSequence is token i of
// the policy's stream; block blocks()[i / block_rows], row i % block_rows).
//
//   SelectKept    Eq. 1: the forced rows, plus the candidates a scorer ranks highest, within C.
//   KillRows      slot-map redirection (Eq. 7): dropped rows become dead slots in every list
//                 (kv::KvView::Kill), so kept rows keep their slot, position and RoPE phase and
//                 the token stream is untouched: the next turn's prompt still matches the prefix.
//   FreeableBlocks  alias-aware deallocation: which blocks may give their storage back, under
//                 conditions (a)-(c) of §3.4 at block granularity (a pool slot here is a block).
//   CompactRows   the classic layout: kept rows copied into a new sequence at positions 0..,
//                 keys re-rotated (what StreamingLLM, SnapKV and H2O publish): the token stream
//                 becomes the kept tokens, so a later prompt matches only up to the first drop.
//
// Thread-safety: pure functions of their arguments; the mutating ones touch only the sequence
// they are given.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"

namespace kvmem::memory {

// Eq. 1's top-k: of `candidates` (storage indices, ascending), the n_keep with the highest
// score[i] (scores indexed by storage index), ties to the more recent row; ascending. All of
// them when there are at most n_keep.
std::vector<int64_t> TopScored(std::span<const int64_t> candidates, std::span<const double> scores,
                               int64_t n_keep);

// Dead slots for `rows` (ascending storage indices) in every (layer, KV head) list.
void KillRows(std::span<const int64_t> rows, kv::KvSequence* seq);

// Blocks (indices into seq.blocks()) whose storage may go back to the pool once the rows not in
// `live` are dead: every written row of the block is dead, and
//   (a) none lies in the protected prefix [0, protected_rows);
//   (b) the block still holds storage (a block given back in an earlier round, whose rows were
//       already redirected, is not freed twice);
//   (c) no row of the block is read by anyone else: no kept row (implied by "every row dead")
//       and none of `shared` (rows a sibling sequence or the prefix cache reads).
// Never the first block (a store reads a leading released run as a sliding window's) nor the
// block new rows are appended to.
// live: (seq.n_rows()) 1 for a row some list still reads.
std::vector<size_t> FreeableBlocks(const kv::KvSequence& seq, std::span<const uint8_t> live,
                                   int64_t protected_rows, std::span<const kv::RowRef> shared);

// Gives back every layer's storage of those blocks (KvSequence::ReleaseStorage).
void FreeBlocks(std::span<const size_t> blocks, kv::KvSequence* seq);

// A new sequence in seq's pool holding copies of `kept` (ascending storage indices) at positions
// 0, 1, ..., keys re-rotated from their old positions (kv::KvPool::Reposition; the K/V bytes are
// read and written through the pool's format, exact for f16 and the row-quantized formats).
// rope: Model::rope_specs(). ResourceExhausted when the pool has no room for the copy.
Result<std::unique_ptr<kv::KvSequence>> CompactRows(const kv::KvSequence& seq,
                                                    std::span<const int64_t> kept,
                                                    const std::vector<kv::RopeSpec>& rope);

}  // namespace kvmem::memory
