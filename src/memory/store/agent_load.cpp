// AgentStore::Load: verify the manifest against the key, the model and the live pool, then
// load the blocks (block_file.h's BlockLoad: read straight into the pool, verified), their data
// on several threads; on any failure the sequence is cleared.
#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

#include "memory/store/agent_store.h"
#include "memory/store/agent_store_state.h"
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

// Blocks a load holds open at once (one file descriptor each).
constexpr size_t kLoadWindow = 32;
// Threads a load reads with: copying from the page cache is bound by a core, not by memory.
constexpr unsigned kLoadThreads = 4;

// BlockLoad::ReadData of every load, on up to kLoadThreads threads (the caller's included); the
// status of each.
std::vector<Status> ReadAll(std::vector<BlockLoad>& loads) {
  std::vector<Status> out(loads.size());
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < loads.size();) out[i] = loads[i].ReadData();
  };
  const unsigned want = std::min<size_t>(
      {kLoadThreads, std::max(1u, std::thread::hardware_concurrency()), loads.size()});
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < want; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no thread to be had: the others do the work
    }
  }
  work();
  for (std::thread& t : helpers) t.join();
  return out;
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
  const Space space = state_->AgentSpace(key);
  const StoreBackend& store = state_->store();
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(space.name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);

  // Read before the manifest: a save in between makes it older than the rows, never newer, so
  // a server comparing it with the store reloads rather than keeps a stale copy.
  KVMEM_ASSIGN_OR_RETURN(const int64_t version, store.Version(space));
  Result<AgentManifest> m = ReadManifest(
      store, space, checkpoint.empty() ? std::string(kManifestName) : CheckpointFile(checkpoint));
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
  uint64_t bytes_read = 0;
  // A window of blocks at a time: they start in order (rows appended), their data is read on
  // several threads, then they finish in order.
  for (size_t w = 0; w < m->blocks.size(); w += kLoadWindow) {
    const size_t end = std::min(m->blocks.size(), w + kLoadWindow);
    const auto fail = [&](size_t i, const Status& st) {
      seq->Clear();
      return st.WithContext(where + ", block " + std::to_string(i) + " ('" + m->blocks[i].file +
                            "')");
    };
    std::vector<BlockLoad> loads;
    loads.reserve(end - w);
    for (size_t i = w; i < end; ++i) {
      const BlockEntry& entry = m->blocks[i];
      const BlockIdentity id{
          m->model_fingerprint,
          std::span<const int32_t>(m->tokens).subspan(i * block_rows, entry.n_rows), std::nullopt};
      Result<std::unique_ptr<Blob>> file = store.Open(space, entry.file);
      if (!file.ok()) {
        // A block the manifest names is part of the cache: its absence is damage, not "no cache".
        const Status& st = file.status();
        return fail(i, st.code() == ErrorCode::kNotFound
                           ? Corrupt("block file missing: " + st.message())
                           : st);
      }
      Result<BlockLoad> load = BlockLoad::Start(std::move(*file), entry, id, seq);
      if (!load.ok()) return fail(i, load.status());
      loads.push_back(std::move(*load));
    }
    const std::vector<Status> read = ReadAll(loads);
    for (size_t i = w; i < end; ++i) {
      BlockLoad& load = loads[i - w];
      Status st = read[i - w];
      if (st.ok()) st = load.Finish(seq);
      if (!st.ok()) return fail(i, st);
      // A leading run of releases is the window's (the sequence keeps account of it); a layer
      // released after a block that keeps it is storage a policy gave back.
      const std::vector<int>& released = m->blocks[i].released_layers;
      for (int l = 0; l < m->geometry.n_layers; ++l) {
        if (!std::binary_search(released.begin(), released.end(), l)) {
          kept_before[l] = true;
        } else if (!kept_before[l]) {
          for (int64_t p : load.positions()) release_cut[l] = std::max(release_cut[l], p);
        }
      }
      bytes_read += load.bytes();
    }
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
  out->version = version;
  return Status::Ok();
}

}  // namespace kvmem::memory::store
