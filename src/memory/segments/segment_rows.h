// KV rows of memory segments, computed once and placed anywhere (KEEP's unit of reuse):
//   EncodeAfter      a unit's rows: tokens computed after a prefix, in a sequence of their own
//   AppendPlaced     copies of stored rows appended to another sequence at new positions, keys
//                    re-rotated on the way (one rounding to the pool's format, as MemArt's
//                    placement; the stored rows stay as they are, so reuse never drifts)
// Window release is off in every sequence made here: placed rows move to later positions.
// Thread-safety: functions over the caller's sequences; the caller holds the compute lock.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_sequence.h"
#include "model/model.h"

namespace kvmem::memory::segments {

// A sequence in prefix's pool whose own rows are `tokens`, computed at positions
// prefix_len, prefix_len + 1, ... reading the prefix's view (its rows at 0..prefix_len-1).
// The result reads the prefix's rows: it must not outlive them in use (only its own rows are
// copied out later).
Result<std::unique_ptr<kv::KvSequence>> EncodeAfter(const model::Model& model, ThreadPool* pool,
                                                    const kv::KvSequence& prefix,
                                                    int64_t prefix_len,
                                                    std::span<const int32_t> tokens,
                                                    int max_batch = 256);

// One row of one layer: `to` (in out) gets `from` (in `in`) with its key re-rotated from where it
// was computed to to_pos. k, v: scratch of k_dim and v_dim floats.
void PlaceRow(const model::Model& model, const kv::RopeSpec& rope, const kv::KvPool& in,
              kv::RowRef from, kv::KvPool* out, kv::RowRef to, int layer, int64_t to_pos, float* k,
              float* v);

// Appends to dst n rows copying src's own rows [src_first, src_first + n) (storage order), read
// at positions first_pos.. with keys re-rotated from where they were computed.
Status AppendPlaced(const model::Model& model, const kv::KvSequence& src, int64_t src_first,
                    int64_t n, kv::KvSequence* dst, int64_t first_pos);

}  // namespace kvmem::memory::segments
