#include "memory/store/manifest.h"

#include <limits>
#include <utility>

#include "memory/store/hash.h"
#include "memory/store/json_util.h"
#include "core/utf8.h"

namespace kvmem::memory::store {
namespace {

// root -> blocks -> block -> released_layers; root -> memory -> config/state -> the policy's own
// values (bounded by the policy's parser).
constexpr int kMaxDepth = 8;
// Bounds that keep sizes and products far from overflow; real models are orders of magnitude
// below them.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxBlockRows = 1 << 16;
constexpr size_t kMaxPolicyName = 64;
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

std::string Hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * s.size());
  for (char c : s) {
    out += kHex[static_cast<uint8_t>(c) >> 4];
    out += kHex[static_cast<uint8_t>(c) & 15];
  }
  return out;
}

Result<std::string> Unhex(std::string_view s, const std::string& path) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (s.size() % 2 != 0) return Corrupt("field '" + path + "' has an odd number of hex digits");
  std::string out(s.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return Corrupt("field '" + path + "' is not lowercase hex");
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

Result<kv::KvFormat> FormatField(const Json& obj, std::string_view key, const std::string& path) {
  KVMEM_ASSIGN_OR_RETURN(std::string name, JsonString(obj, key, path));
  Result<kv::KvFormat> f = kv::ParseKvFormat(name);
  if (!f.ok())
    return Corrupt("field '" + path + "." + std::string(key) + "': " + f.status().message());
  return *f;
}

Result<BlockEntry> ParseBlock(const Json& j, const std::string& path, const kv::KvGeometry& g) {
  BlockEntry b;
  KVMEM_ASSIGN_OR_RETURN(b.file, JsonString(j, "file", path));
  KVMEM_ASSIGN_OR_RETURN(int64_t n_rows, JsonInt(j, "n_rows", path, 1, g.block_rows));
  b.n_rows = static_cast<int32_t>(n_rows);
  KVMEM_ASSIGN_OR_RETURN(b.first_pos, JsonInt(j, "first_pos", path, kI64Min + 1, kI64Max));
  KVMEM_ASSIGN_OR_RETURN(b.checksum, JsonString(j, "xxh3_128", path));
  if (!IsXxh128Hex(b.checksum)) {
    return Corrupt("field '" + path + ".xxh3_128' " + Quoted(b.checksum) + " is not 32 hex digits");
  }
  if (b.file != BlockFileName(b.checksum)) {
    return Corrupt("field '" + path + ".file' " + Quoted(b.file) + " does not match its checksum " +
                   "(expected '" + BlockFileName(b.checksum) + "')");
  }
  KVMEM_ASSIGN_OR_RETURN(int64_t bytes, JsonInt(j, "bytes", path, 8, kI64Max));
  b.bytes = static_cast<uint64_t>(bytes);
  KVMEM_ASSIGN_OR_RETURN(const Json* released, JsonArray(j, "released_layers", path));
  for (size_t i = 0; i < released->size(); ++i) {
    const std::string p = path + ".released_layers[" + std::to_string(i) + "]";
    KVMEM_ASSIGN_OR_RETURN(int64_t l, JsonIntValue((*released)[i], p, 0, g.n_layers - 1));
    if (!b.released_layers.empty() && l <= b.released_layers.back()) {
      return Corrupt("field '" + p + "' is not in ascending order");
    }
    b.released_layers.push_back(static_cast<int>(l));
  }
  return b;
}

// Rows and releases must add up the way a KvSequence lays them out.
Status CheckBlocks(const AgentManifest& m) {
  int64_t rows = 0;
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    const BlockEntry& b = m.blocks[i];
    const std::string p = "blocks[" + std::to_string(i) + "]";
    if (i + 1 < m.blocks.size() && b.n_rows != m.geometry.block_rows) {
      return Corrupt(p + ".n_rows = " + std::to_string(b.n_rows) + ": only the last block may " +
                     "hold fewer than block_rows (" + std::to_string(m.geometry.block_rows) + ")");
    }
    if (!b.released_layers.empty() && b.n_rows != m.geometry.block_rows) {
      return Corrupt(p + ".released_layers: only whole blocks can be released");
    }
    rows += b.n_rows;
  }
  if (rows != static_cast<int64_t>(m.tokens.size())) {
    return Corrupt("blocks hold " + std::to_string(rows) + " rows but token_ids has " +
                   std::to_string(m.tokens.size()) + " tokens");
  }
  return Status::Ok();
}

// The policy name: 1 to 64 of [a-z0-9_-] (the table's names are such; a stored name is checked
// against the table by the runtime).
bool IsPolicyName(std::string_view s) {
  if (s.empty() || s.size() > kMaxPolicyName) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

Result<MemoryRecord> ParseMemoryRecord(const Json& j) {
  KVMEM_ASSIGN_OR_RETURN(const Json* o, JsonObject(j, "memory", ""));
  MemoryRecord r;
  if (o->contains("mode") && !o->contains("policy")) {
    // Written before the policy seam: {"mode": "full" | "retrieval", <settings>}.
    KVMEM_ASSIGN_OR_RETURN(r.policy, JsonString(*o, "mode", "memory"));
    if (r.policy != "full" && r.policy != "retrieval") {
      return Corrupt("field 'memory.mode' is " + Quoted(r.policy) +
                     ", expected 'full' or 'retrieval'");
    }
    r.legacy = true;
    for (const auto& [key, value] : o->items()) {
      if (key != "mode") r.config[key] = value;
    }
    return r;
  }
  KVMEM_ASSIGN_OR_RETURN(r.policy, JsonString(*o, "policy", "memory"));
  if (!IsPolicyName(r.policy)) {
    return Corrupt("field 'memory.policy' is " + Quoted(r.policy) +
                   ", expected 1 to 64 of a-z, 0-9, '_' and '-'");
  }
  if (o->contains("config")) {
    KVMEM_ASSIGN_OR_RETURN(const Json* c, JsonObject(*o, "config", "memory"));
    r.config = *c;
  }
  if (o->contains("state")) {
    KVMEM_ASSIGN_OR_RETURN(const Json* st, JsonObject(*o, "state", "memory"));
    r.state = *st;
  }
  if (o->contains("conversation")) {
    KVMEM_ASSIGN_OR_RETURN(std::string c, JsonString(*o, "conversation", "memory"));
    if (c != "server" && c != "client") {
      return Corrupt("field 'memory.conversation' is " + Quoted(c) +
                     ", expected 'client' or 'server'");
    }
    r.server_conversation = c == "server";
  }
  if (o->contains("max_checkpoints")) {
    KVMEM_ASSIGN_OR_RETURN(int64_t n, JsonInt(*o, "max_checkpoints", "memory", 0, kMaxCheckpoints));
    r.max_checkpoints = static_cast<int>(n);
  }
  return r;
}

}  // namespace

std::string BlockFileName(std::string_view checksum) {
  return "kv-" + std::string(checksum) + ".safetensors";
}

std::string ManifestToJson(const AgentManifest& m) {
  nlohmann::ordered_json j;
  j["format"] = kManifestFormat;
  j["format_version"] = kManifestVersion;
  j["tenant"] = m.key.tenant;
  j["agent_id"] = m.key.id;
  j["model_fingerprint"] = m.model_fingerprint;
  j["kv_format"] = {{"k", kv::KvFormatName(m.formats.k)}, {"v", kv::KvFormatName(m.formats.v)}};
  j["geometry"] = {{"n_layers", m.geometry.n_layers},
                   {"n_kv_heads", m.geometry.n_kv_heads},
                   {"head_dim_k", m.geometry.head_dim_k},
                   {"head_dim_v", m.geometry.head_dim_v},
                   {"block_rows", m.geometry.block_rows}};
  j["n_tokens"] = m.tokens.size();
  j["token_ids"] = m.tokens;
  // JSON strings must be UTF-8; a turn cut inside a character (byte-level BPE can emit half of
  // one) still round-trips through hex.
  if (IsValidUtf8(m.text)) {
    j["text"] = m.text;
  } else {
    j["text_hex"] = Hex(m.text);
  }
  nlohmann::ordered_json blocks = nlohmann::ordered_json::array();
  for (const BlockEntry& b : m.blocks) {
    blocks.push_back({{"file", b.file},
                      {"n_rows", b.n_rows},
                      {"first_pos", b.first_pos},
                      {"xxh3_128", b.checksum},
                      {"bytes", b.bytes},
                      {"released_layers", b.released_layers}});
  }
  j["blocks"] = std::move(blocks);
  j["last_use_unix_ms"] = m.last_use_unix_ms;
  j["memory"] = {{"policy", m.memory.policy}, {"config", m.memory.config}};
  if (!m.memory.state.empty()) j["memory"]["state"] = m.memory.state;
  if (m.memory.server_conversation) j["memory"]["conversation"] = "server";
  if (m.memory.max_checkpoints != kDefaultMaxCheckpoints) {
    j["memory"]["max_checkpoints"] = m.memory.max_checkpoints;
  }
  return j.dump();
}

Result<AgentManifest> ParseManifest(std::string_view text) {
  KVMEM_ASSIGN_OR_RETURN(const Json j, ParseUntrustedJson(text, kMaxDepth, "manifest"));
  KVMEM_ASSIGN_OR_RETURN(std::string format, JsonString(j, "format", ""));
  if (format != kManifestFormat) {
    return Corrupt("field 'format' is " + Quoted(format) + ", expected '" +
                   std::string(kManifestFormat) + "'");
  }
  KVMEM_ASSIGN_OR_RETURN(int64_t version, JsonInt(j, "format_version", "", 0, kI64Max));
  if (version != kManifestVersion) {
    return Unsupported("manifest format_version " + std::to_string(version) +
                       " (this build reads " + std::to_string(kManifestVersion) + ")");
  }
  AgentManifest m;
  KVMEM_ASSIGN_OR_RETURN(m.key.tenant, JsonString(j, "tenant", ""));
  KVMEM_ASSIGN_OR_RETURN(m.key.id, JsonString(j, "agent_id", ""));
  if (Status st = ValidateAgentKey(m.key); !st.ok()) return Corrupt("manifest: " + st.message());
  KVMEM_ASSIGN_OR_RETURN(m.model_fingerprint, JsonString(j, "model_fingerprint", ""));
  if (!IsXxh128Hex(m.model_fingerprint)) {
    return Corrupt("field 'model_fingerprint' " + Quoted(m.model_fingerprint) +
                   " is not 32 hex digits");
  }
  KVMEM_ASSIGN_OR_RETURN(const Json* fmt, JsonObject(j, "kv_format", ""));
  KVMEM_ASSIGN_OR_RETURN(m.formats.k, FormatField(*fmt, "k", "kv_format"));
  KVMEM_ASSIGN_OR_RETURN(m.formats.v, FormatField(*fmt, "v", "kv_format"));

  KVMEM_ASSIGN_OR_RETURN(const Json* geo, JsonObject(j, "geometry", ""));
  kv::KvGeometry& g = m.geometry;
  KVMEM_ASSIGN_OR_RETURN(int64_t n_layers, JsonInt(*geo, "n_layers", "geometry", 1, kMaxLayers));
  KVMEM_ASSIGN_OR_RETURN(int64_t heads, JsonInt(*geo, "n_kv_heads", "geometry", 1, kMaxHeads));
  KVMEM_ASSIGN_OR_RETURN(int64_t hk, JsonInt(*geo, "head_dim_k", "geometry", 1, kMaxHeadDim));
  KVMEM_ASSIGN_OR_RETURN(int64_t hv, JsonInt(*geo, "head_dim_v", "geometry", 1, kMaxHeadDim));
  KVMEM_ASSIGN_OR_RETURN(int64_t rows, JsonInt(*geo, "block_rows", "geometry", 1, kMaxBlockRows));
  g = {static_cast<int>(n_layers), static_cast<int>(heads), static_cast<int>(hk),
       static_cast<int>(hv), static_cast<int>(rows)};

  KVMEM_ASSIGN_OR_RETURN(int64_t n_tokens, JsonInt(j, "n_tokens", "", 0, kI64Max));
  KVMEM_ASSIGN_OR_RETURN(const Json* ids, JsonArray(j, "token_ids", ""));
  if (static_cast<int64_t>(ids->size()) != n_tokens) {
    return Corrupt("field 'token_ids' has " + std::to_string(ids->size()) +
                   " entries but n_tokens is " + std::to_string(n_tokens));
  }
  m.tokens.reserve(ids->size());
  for (size_t i = 0; i < ids->size(); ++i) {
    // Range against the vocabulary is checked by the store, which knows it.
    KVMEM_ASSIGN_OR_RETURN(
        int64_t id,
        JsonIntValue((*ids)[i], "token_ids[" + std::to_string(i) + "]",
                     std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
    m.tokens.push_back(static_cast<int32_t>(id));
  }
  if (j.contains("text_hex")) {
    KVMEM_ASSIGN_OR_RETURN(std::string hex, JsonString(j, "text_hex", ""));
    KVMEM_ASSIGN_OR_RETURN(m.text, Unhex(hex, "text_hex"));
  } else {
    KVMEM_ASSIGN_OR_RETURN(m.text, JsonString(j, "text", ""));
  }

  KVMEM_ASSIGN_OR_RETURN(const Json* blocks, JsonArray(j, "blocks", ""));
  for (size_t i = 0; i < blocks->size(); ++i) {
    KVMEM_ASSIGN_OR_RETURN(BlockEntry b,
                           ParseBlock((*blocks)[i], "blocks[" + std::to_string(i) + "]", g));
    m.blocks.push_back(std::move(b));
  }
  KVMEM_RETURN_IF_ERROR(CheckBlocks(m));
  KVMEM_ASSIGN_OR_RETURN(m.last_use_unix_ms, JsonInt(j, "last_use_unix_ms", "", kI64Min, kI64Max));
  if (j.contains("memory")) {
    KVMEM_ASSIGN_OR_RETURN(m.memory, ParseMemoryRecord(j));
  }
  return m;
}

}  // namespace kvmem::memory::store
