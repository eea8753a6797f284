// An agent's manifest (manifest.json in its directory): who it is, which model and KV layout its
// cache belongs to, the token ids and rendered text the cache was computed from, and the list of
// immutable block files holding the rows. Writing the manifest (atomically) is what
// acknowledges a save; block files it does not name are garbage.
//
//   {"format": "kvmem-agent-manifest", "format_version": 1,
//    "tenant": "acme", "agent_id": "planner",
//    "model_fingerprint": "<32 hex>",
//    "kv_format": {"k": "f16", "v": "q8_0"},
//    "geometry": {"n_layers": 30, "n_kv_heads": 3, "head_dim_k": 64, "head_dim_v": 64,
//                 "block_rows": 256},
//    "n_tokens": 300, "token_ids": [1, 2, ...],
//    "text": "<rendered prompt>"            (or "text_hex" when the text is not valid UTF-8)
//    "blocks": [{"file": "kv-<32 hex>.safetensors", "n_rows": 256, "first_pos": 0,
//                "xxh3_128": "<32 hex>", "bytes": 123456, "released_layers": [0, 1]}, ...],
//    "last_use_unix_ms": 1763700000000,
//    "memory": {"policy": "<name>", "config": {...}, "state": {...},
//               "conversation": "server", "max_checkpoints": 4}
//                                             (optional; absent = {"policy": "full"}; config and
//                                              state are the policy's own, opaque here)
//
// ParseManifest checks the schema, the types and everything that needs no outside knowledge
// (valid names, counts adding up, released layers only on whole blocks); comparing with
// the live model and pool is the store's job. Thread-safe: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/kv_format.h"
#include "kv/kv_pool.h"
#include "memory/store/agent_id.h"
#include "memory/store/json_util.h"

namespace kvmem::memory::store {

inline constexpr int kManifestVersion = 1;
inline constexpr std::string_view kManifestFormat = "kvmem-agent-manifest";
inline constexpr std::string_view kManifestName = "manifest.json";

struct BlockEntry {
  std::string file;                  // BlockFileName(checksum): names are content-addressed
  int32_t n_rows = 0;                // 1..block_rows; only the last block may be partial
  int64_t first_pos = 0;             // rotated position of the block's first row
  std::string checksum;              // XXH3-128 of the whole file, hex
  uint64_t bytes = 0;                // file size
  // Ascending; stored as absent: a leading run of a layer's blocks is a sliding-window release
  // (kv_sequence.h), a later block's is storage a policy gave back (a compressed cache's slots).
  std::vector<int> released_layers;
};

// How the agent's rows serve its turns: the memory policy's name and its own config and state
// (memory/policy/), which the store keeps as given and never interprets; the policy's parser
// validates them when the agent is loaded. Manifests written before policies had a seam carry
// {"mode": "full" | "retrieval", <settings>}: they are read as policy = the mode, config = the
// settings, legacy = true (the policy table upgrades them).
//
// Two settings of the agent's conversation ride along (absent = the defaults): "conversation":
// "server" when each request's messages are appended to the stored conversation instead of
// resending it, and "max_checkpoints", how many conversations a diverging request may leave as
// checkpoints (agent_store.h).
inline constexpr int kDefaultMaxCheckpoints = 4;
inline constexpr int kMaxCheckpoints = 64;
struct MemoryRecord {
  std::string policy = "full";
  Json config = Json::object();
  Json state = Json::object();
  bool legacy = false;
  bool server_conversation = false;
  int max_checkpoints = kDefaultMaxCheckpoints;
  bool operator==(const MemoryRecord&) const = default;
};

struct AgentManifest {
  AgentKey key;
  std::string model_fingerprint;
  kv::KvFormats formats;
  kv::KvGeometry geometry;
  std::vector<int32_t> tokens;  // (n_tokens) one per stored row, storage order
  std::string text;             // the rendered prompt the tokens came from (any bytes)
  std::vector<BlockEntry> blocks;
  int64_t last_use_unix_ms = 0;
  MemoryRecord memory;
};

// "kv-<checksum>.safetensors".
std::string BlockFileName(std::string_view checksum);

std::string ManifestToJson(const AgentManifest& m);
Result<AgentManifest> ParseManifest(std::string_view json);

}  // namespace kvmem::memory::store
