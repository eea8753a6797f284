// libFuzzer target for agent manifests (memory/store/manifest.h) and the policy configs they
// carry. The input is a manifest's text. When ParseManifest accepts it:
//   - its key is a valid agent key and maps to a 32-hex directory name;
//   - ManifestToJson of the result parses again to the same manifest (what the store writes it
//     can read back);
//   - the memory record goes through the policy table as a load does (SpecFromRecord, for a
//     server without and with a shipped MemArt preset), and a config the table accepted is
//     accepted again, unchanged, when it comes back from the manifest the next save writes.
// See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "memory/policy/policy_table.h"
#include "memory/store/agent_id.h"
#include "memory/store/hash.h"
#include "memory/store/manifest.h"

namespace kvmem::fuzz {
namespace {

using memory::store::AgentManifest;
using memory::store::BlockEntry;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

bool SameBlocks(const BlockEntry& a, const BlockEntry& b) {
  return a.file == b.file && a.n_rows == b.n_rows && a.first_pos == b.first_pos &&
         a.checksum == b.checksum && a.bytes == b.bytes && a.released_layers == b.released_layers;
}

// Equal as the store uses them; `legacy` is how a record was spelt, and a rewrite upgrades it.
bool SameManifest(const AgentManifest& a, const AgentManifest& b) {
  if (a.blocks.size() != b.blocks.size()) return false;
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    if (!SameBlocks(a.blocks[i], b.blocks[i])) return false;
  }
  const kv::KvGeometry &ga = a.geometry, &gb = b.geometry;
  return a.key == b.key && a.model_fingerprint == b.model_fingerprint && a.formats == b.formats &&
         ga.n_layers == gb.n_layers && ga.n_kv_heads == gb.n_kv_heads &&
         ga.head_dim_k == gb.head_dim_k && ga.head_dim_v == gb.head_dim_v &&
         ga.block_rows == gb.block_rows && a.tokens == b.tokens && a.text == b.text &&
         a.last_use_unix_ms == b.last_use_unix_ms && a.memory.policy == b.memory.policy &&
         a.memory.config == b.memory.config && a.memory.state == b.memory.state;
}

// The record as a load reads it; a config accepted once must be accepted again as stored.
void CheckPolicy(const memory::PolicyEnv& env, const memory::store::MemoryRecord& record) {
  Result<memory::MemorySpec> spec = memory::SpecFromRecord(env, record);
  if (!spec.ok()) {
    Check(spec.status().code() == ErrorCode::kCorrupt && !spec.status().message().empty());
    return;
  }
  const memory::store::MemoryRecord saved = memory::RecordOf(*spec, record.state);
  Result<memory::MemorySpec> again = memory::SpecFromRecord(env, saved);
  Check(again.ok() && again->kind == spec->kind && again->config == spec->config);
}

}  // namespace
}  // namespace kvmem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmem;
  using namespace kvmem::fuzz;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<memory::store::AgentManifest> m = memory::store::ParseManifest(text);
  if (!m.ok()) {
    Check(!m.status().message().empty());
    return 0;
  }
  Check(memory::store::ValidateAgentKey(m->key).ok());
  static const memory::store::NameSecret kSecret{};  // any secret: the name's shape is checked
  Check(memory::store::IsXxh128Hex(memory::store::AgentDirName(m->key, kSecret)));

  Result<memory::store::AgentManifest> back =
      memory::store::ParseManifest(memory::store::ManifestToJson(*m));
  Check(back.ok() && SameManifest(*m, *back));

  static const memory::PolicyEnv plain;
  static const memory::PolicyEnv smollm2 = [] {
    memory::PolicyEnv env;
    env.model_fingerprint = "1dff70ef9e211d0ab8951aa641e75aa1";  // ships a MemArt preset
    return env;
  }();
  CheckPolicy(plain, m->memory);
  CheckPolicy(smollm2, m->memory);
  return 0;
}
