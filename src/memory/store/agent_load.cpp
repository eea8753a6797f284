// AgentStore::Load: verify the manifest against the key, the model and the live pool, then
// decode, verify and apply one block at a time; on any failure the sequence is cleared.
#include <algorithm>
#include <limits>

#include "memory/store/agent_store.h"
#include "memory/store/agent_store_state.h"
#include "memory/store/atomic_file.h"
#include "memory/store/block_file.h"

namespace kvmem::memory::store {
namespace {

std::string GeometryField(const char* name, int stored, int live) {
  return std::string(name) + " " + std::to_string(stored) + " (the live pool has " +
         std::to_string(live) + ")";
}

// Whether the manifest's cache can be loaded into `pool` for the model the store serves.
Status CheckAgainstLive(const AgentManifest& m, const AgentKey& key, const StoreOptions& opt,
                        const kv::KvPool& pool) {
  if (!(m.key == key)) {
    return Corrupt("manifest belongs to agent " + AgentLabel(m.key) + ", not " + AgentLabel(key));
  }
  if (m.model_fingerprint != opt.model_fingerprint) {
    return FailedPrecondition("cache was computed by model " + m.model_fingerprint +
                              ", the loaded model is " + opt.model_fingerprint);
  }
  if (m.formats != pool.formats()) {
    return FailedPrecondition(std::string("cache KV formats are k=") +
                              kv::KvFormatName(m.formats.k) +
                              " v=" + kv::KvFormatName(m.formats.v) +
                              ", the pool stores k=" + kv::KvFormatName(pool.formats().k) +
                              " v=" + kv::KvFormatName(pool.formats().v));
  }
  const kv::KvGeometry& s = m.geometry;
  const kv::KvGeometry& l = pool.geometry();
  std::string diff;
  if (s.n_layers != l.n_layers) diff = GeometryField("n_layers", s.n_layers, l.n_layers);
  if (s.n_kv_heads != l.n_kv_heads) diff = GeometryField("n_kv_heads", s.n_kv_heads, l.n_kv_heads);
  if (s.head_dim_k != l.head_dim_k) diff = GeometryField("head_dim_k", s.head_dim_k, l.head_dim_k);
  if (s.head_dim_v != l.head_dim_v) diff = GeometryField("head_dim_v", s.head_dim_v, l.head_dim_v);
  if (s.block_rows != l.block_rows) diff = GeometryField("block_rows", s.block_rows, l.block_rows);
  if (!diff.empty()) return FailedPrecondition("cache geometry differs: " + diff);
  for (size_t i = 0; i < m.tokens.size(); ++i) {
    if (m.tokens[i] < 0 || m.tokens[i] >= opt.n_vocab) {
      return OutOfRange("token_ids[" + std::to_string(i) + "] = " + std::to_string(m.tokens[i]) +
                        " is outside the vocabulary (n_vocab " + std::to_string(opt.n_vocab) + ")");
    }
  }
  return Status::Ok();
}

// Appends the block's rows to seq (runs of consecutive positions become view runs at those
// positions), fills their layers and positions, and releases the layers stored as absent.
Status ApplyBlock(const DecodedBlock& d, kv::KvSequence* seq) {
  kv::KvPool* pool = seq->pool();
  const int32_t n = static_cast<int32_t>(d.positions.size());
  int32_t block = -1;
  for (int32_t i = 0; i < n;) {
    int32_t j = i + 1;
    while (j < n && d.positions[j - 1] != std::numeric_limits<int64_t>::max() &&
           d.positions[j] == d.positions[j - 1] + 1) {
      ++j;
    }
    KVMEM_ASSIGN_OR_RETURN(std::vector<kv::RowRef> rows, seq->AppendRows(j - i, d.positions[i]));
    block = rows.front().block;
    i = j;
  }
  for (int32_t r = 0; r < n; ++r) pool->set_rotated_pos({block, r}, d.positions[r]);
  for (int l = 0; l < static_cast<int>(d.layers.size()); ++l) {
    const DecodedBlock::Layer& layer = d.layers[l];
    if (layer.released) {
      seq->view().Hide({block, 0}, pool->geometry().block_rows, l);
      pool->ReleaseLayer(block, l);
      continue;
    }
    KVMEM_RETURN_IF_ERROR(pool->LoadLayer(block, l, layer.data, layer.staging, n));
  }
  return Status::Ok();
}

}  // namespace

Status AgentStore::Load(const AgentKey& key, kv::KvSequence* seq, AgentRecord* out,
                        std::string_view checkpoint) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const std::string where = "loading agent " + AgentLabel(key) +
                            (checkpoint.empty() ? "" : " checkpoint " + std::string(checkpoint));
  if (!checkpoint.empty() && !IsCheckpointId(checkpoint)) {
    return InvalidArgument(where + ": not a checkpoint id");
  }
  if (seq->n_rows() != 0) {
    return FailedPrecondition(where + ": the sequence already holds " +
                              std::to_string(seq->n_rows()) + " rows");
  }
  const std::string dir_name = state_->DirName(key);
  const std::string dir = state_->AgentDir(dir_name);
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(dir_name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);

  Result<AgentManifest> m =
      ReadManifest(state_->fs(), dir,
                   checkpoint.empty() ? std::string(kManifestName) : CheckpointFile(checkpoint));
  if (!m.ok()) {
    if (m.status().code() == ErrorCode::kNotFound) {
      return NotFound(where + ": no stored cache");
    }
    return m.status().WithContext(where);
  }
  KVMEM_RETURN_IF_ERROR(
      CheckAgainstLive(*m, key, state_->options, *seq->pool()).WithContext(where + " (manifest)"));

  const int block_rows = m->geometry.block_rows;
  std::vector<int64_t> release_cut(m->geometry.n_layers, kv::kNoPosition);
  std::vector<bool> kept_before(m->geometry.n_layers, false);  // a block keeping the layer seen
  std::vector<uint8_t> file;
  uint64_t bytes_read = 0;
  for (size_t i = 0; i < m->blocks.size(); ++i) {
    const BlockEntry& entry = m->blocks[i];
    const BlockIdentity id{
        m->model_fingerprint,
        std::span<const int32_t>(m->tokens).subspan(i * block_rows, entry.n_rows), std::nullopt};
    Status st = ReadFileNoFollow(dir, entry.file, entry.bytes, &file, state_->fs());
    // A block the manifest names is part of the cache: its absence is damage, not "no cache".
    if (st.code() == ErrorCode::kNotFound) st = Corrupt("block file missing: " + st.message());
    Result<DecodedBlock> d =
        st.ok() ? DecodeBlock(file, entry, id, *seq->pool()) : Result<DecodedBlock>(st);
    if (d.ok()) st = ApplyBlock(*d, seq);
    if (!d.ok() || !st.ok()) {
      seq->Clear();
      return (d.ok() ? st : d.status())
          .WithContext(where + ", block " + std::to_string(i) + " ('" + entry.file + "')");
    }
    // A leading run of releases is the window's (the sequence keeps account of it); a layer
    // released after a block that keeps it is storage a policy gave back.
    for (int l = 0; l < m->geometry.n_layers; ++l) {
      const bool released = std::binary_search(entry.released_layers.begin(),
                                               entry.released_layers.end(), l);
      if (!released) {
        kept_before[l] = true;
      } else if (!kept_before[l]) {
        for (int64_t p : d->positions) release_cut[l] = std::max(release_cut[l], p);
      }
    }
    bytes_read += file.size();
  }
  // The sequence's own bookkeeping of released layers (the forward pass checks it); storage
  // was given back block by block above.
  for (int l = 0; l < m->geometry.n_layers; ++l) {
    if (release_cut[l] != kv::kNoPosition) seq->ReleaseLayerThrough(l, release_cut[l]);
  }
  out->tokens = std::move(m->tokens);
  out->text = std::move(m->text);
  out->last_use_unix_ms = m->last_use_unix_ms;
  out->blocks = static_cast<int>(m->blocks.size());
  out->bytes_read = bytes_read;
  out->memory = std::move(m->memory);
  return Status::Ok();
}

}  // namespace kvmem::memory::store
