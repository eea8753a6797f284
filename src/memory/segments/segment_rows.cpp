#include "memory/segments/segment_rows.h"

#include <vector>

#include "engine/forward.h"
#include "kernels/ops.h"

namespace kvmem::memory::segments {

Result<std::unique_ptr<kv::KvSequence>> EncodeAfter(const model::Model& model, ThreadPool* pool,
                                                    const kv::KvSequence& prefix,
                                                    int64_t prefix_len,
                                                    std::span<const int32_t> tokens,
                                                    int max_batch) {
  std::unique_ptr<kv::KvSequence> unit = kv::KvSequence::Fork(prefix);
  unit->set_window_release(false);
  if (tokens.empty()) return unit;
  std::vector<float> unused;
  KVMEM_RETURN_IF_ERROR(
      engine::Forward(model, pool, unit.get(), tokens, prefix_len, false, &unused, max_batch));
  return unit;
}

void PlaceRow(const model::Model& model, const kv::RopeSpec& rope, const kv::KvPool& in,
              kv::RowRef from, kv::KvPool* out, kv::RowRef to, int layer, int64_t to_pos, float* k,
              float* v) {
  const model::ModelSpec& spec = model.spec();
  in.ReadToken(from, layer, k, v);
  const int64_t delta = to_pos - in.rotated_pos(from);
  if (delta != 0 && rope.rot_dim > 0) {
    kernels::Rope(k, spec.n_kv_heads, spec.head_dim_k, rope.rot_dim, delta, rope.freq_base,
                  rope.mode, rope.factors(), rope.scaling);
  }
  out->WriteToken(to, layer, k, v);
}

Status AppendPlaced(const model::Model& model, const kv::KvSequence& src, int64_t src_first,
                    int64_t n, kv::KvSequence* dst, int64_t first_pos) {
  if (n <= 0) return Status::Ok();
  if (src_first < 0 || src_first + n > src.n_rows()) {
    return OutOfRange("rows " + std::to_string(src_first) + ".." + std::to_string(src_first + n) +
                      " outside a segment cache of " + std::to_string(src.n_rows()) + " rows");
  }
  KVMEM_ASSIGN_OR_RETURN(std::vector<kv::RowRef> rows,
                         dst->AppendRows(static_cast<int>(n), first_pos));
  const model::ModelSpec& spec = model.spec();
  const std::vector<kv::RopeSpec> rope = model.rope_specs();
  kv::KvPool& out = *dst->pool();
  const kv::KvPool& in = *src.pool();
  std::vector<float> k(spec.k_dim()), v(static_cast<size_t>(spec.n_kv_heads) * spec.head_dim_v);
  for (int l = 0; l < spec.n_layers; ++l) {
    for (int64_t i = 0; i < n; ++i) {
      PlaceRow(model, rope[l], in, kv::RowAt(src, src_first + i), &out, rows[i], l, first_pos + i,
               k.data(), v.data());
    }
  }
  for (int64_t i = 0; i < n; ++i) out.set_rotated_pos(rows[i], first_pos + i);
  return Status::Ok();
}

}  // namespace kvmem::memory::segments
