#include "memory/store/agent_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/log.h"
#include "memory/store/agent_store_state.h"
#include "memory/store/atomic_file.h"
#include "memory/store/block_file.h"
#include "memory/store/hash.h"
#include "memory/store/local_backend.h"
#include "memory/store/redis_backend.h"

namespace kvmem::memory::store {
namespace {

constexpr size_t kModelDirHexLen = 16;
constexpr std::string_view kNameSecretFile = "name-secret";

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Makes an agent's space whole again after a crash (a local store, under its lock): blocks no
// manifest names go; a space without a manifest (a first save or a Delete cut short) goes
// entirely. Returns the key its manifest names, if it has a readable one.
Result<std::optional<AgentKey>> Recover(StoreBackend& store, const Space& space) {
  Result<AgentManifest> m = ReadManifest(store, space);
  if (m.ok()) {
    RemoveUnreferencedBlocks(store, space, m->blocks, {});
    return std::optional<AgentKey>(std::move(m->key));
  }
  if (m.status().code() != ErrorCode::kNotFound) return std::optional<AgentKey>();  // kept
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, store.List(space));
  size_t left = names.size();
  for (const std::string& n : names) {
    if (IsBlockFileName(n) && store.Remove(space, n, {}).ok()) --left;
  }
  for (const std::string& id : CheckpointIds(names)) {  // a Delete the crash interrupted
    if (store.Remove(space, CheckpointFile(id), {}).ok()) --left;
  }
  if (left == 0) {  // else something else lives there: kept
    Status removed = store.RemoveSpace(space, {});
    if (!removed.ok()) KVMEM_LOG_WARN("%s", removed.ToString().c_str());
  }
  return std::optional<AgentKey>();
}

// The store's secret for agent space names (agent_id.h), created on first use; on a shared
// backend the first server to create it wins and every server reads that one.
Result<NameSecret> LoadOrCreateNameSecret(StoreBackend& store) {
  NameSecret secret{};
  if (::getrandom(secret.data(), secret.size(), 0) != static_cast<ssize_t>(secret.size())) {
    return IoError(std::string("getrandom: ") + std::strerror(errno));
  }
  KVMEM_RETURN_IF_ERROR(store.PutIfAbsent({}, kNameSecretFile, secret).status());
  std::vector<uint8_t> bytes;
  KVMEM_RETURN_IF_ERROR(ReadObject(store, {}, kNameSecretFile, kNameSecretBytes, &bytes));
  if (bytes.size() != secret.size()) {
    return Corrupt("'" + store.Where({}, kNameSecretFile) + "' holds " +
                   std::to_string(bytes.size()) + " bytes, expected " +
                   std::to_string(secret.size()));
  }
  std::copy(bytes.begin(), bytes.end(), secret.begin());
  return secret;
}

Result<std::unique_ptr<StoreBackend>> OpenBackend(const StoreOptions& o, std::string* model_dir) {
  if (IsRedisUrl(o.root)) {
    KVMEM_ASSIGN_OR_RETURN(RedisOptions ro, ParseRedisUrl(o.root));
    ro.timeout = o.redis_timeout;
    ro.lease_ttl = o.lease_ttl;
    ro.cache_bytes = o.cache_bytes;
    ro.cache_dir = o.cache_dir;
    ro.cache_dir_bytes = o.cache_dir_bytes;
    KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<RedisBackend> b,
                           RedisBackend::Open(std::move(ro), o.model_fingerprint));
    *model_dir = b->Describe();
    return std::unique_ptr<StoreBackend>(std::move(b));
  }
  std::error_code ec;
  std::filesystem::create_directories(o.root, ec);
  if (ec) return IoError("create store root '" + o.root + "': " + ec.message());
  *model_dir = o.root + "/" + o.model_fingerprint.substr(0, kModelDirHexLen);
  KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<LocalBackend> b,
                         LocalBackend::Open(*model_dir, o.file_ops));
  return std::unique_ptr<StoreBackend>(std::move(b));
}

}  // namespace

std::string AgentLabel(const AgentKey& key) { return "'" + key.tenant + "/" + key.id + "'"; }

Status ReadObject(const StoreBackend& store, const Space& space, std::string_view name,
                  uint64_t max_bytes, std::vector<uint8_t>* out) {
  KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<Blob> blob, store.Open(space, name));
  if (blob->size() > max_bytes) {
    return Corrupt("'" + blob->where() + "' is " + std::to_string(blob->size()) +
                   " bytes, more than the " + std::to_string(max_bytes) + " expected");
  }
  out->resize(blob->size());
  return blob->ReadAt(0, *out);
}

Result<AgentManifest> ReadManifest(const StoreBackend& store, const Space& space,
                                   std::string_view file) {
  std::vector<uint8_t> bytes;
  KVMEM_RETURN_IF_ERROR(ReadObject(store, space, file, kMaxManifestBytes, &bytes));
  Result<AgentManifest> m =
      ParseManifest({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  if (!m.ok()) return m.status().WithContext("manifest '" + store.Where(space, file) + "'");
  return m;
}

bool IsBlockFileName(std::string_view name) {
  constexpr std::string_view kPre = "kv-", kSuf = ".safetensors";
  return name.size() == kPre.size() + kXxh128HexLen + kSuf.size() && name.starts_with(kPre) &&
         name.ends_with(kSuf) && IsXxh128Hex(name.substr(kPre.size(), kXxh128HexLen));
}

int RemoveUnreferencedBlocks(StoreBackend& store, const Space& space,
                             const std::vector<BlockEntry>& keep, std::string_view fence) {
  Result<std::vector<std::string>> names = store.List(space);
  if (!names.ok()) return 0;
  std::set<std::string> kept;
  for (const BlockEntry& b : keep) kept.insert(b.file);
  for (const std::string& id : CheckpointIds(*names)) {
    Result<AgentManifest> c = ReadManifest(store, space, CheckpointFile(id));
    if (!c.ok()) return 0;
    for (const BlockEntry& b : c->blocks) kept.insert(b.file);
  }
  int removed = 0;
  for (const std::string& n : *names) {
    if (IsBlockFileName(n) && !kept.count(n) && store.Remove(space, n, fence).ok()) ++removed;
  }
  return removed;
}

std::shared_ptr<std::mutex> AgentStore::State::AgentLock(const std::string& dir_name) {
  std::lock_guard<std::mutex> g(mu);
  std::shared_ptr<std::mutex>& m = agent_locks[dir_name];
  if (!m) m = std::make_shared<std::mutex>();
  return m;
}

// A local store's recovery after a crash (agent_store.h), and the move of spaces not under
// their keyed name.
Status AgentStore::State::RecoverLocal() {
  State& s = *this;
  KVMEM_ASSIGN_OR_RETURN(std::vector<Space> spaces, s.store().Spaces());
  for (const Space& space : spaces) {
    KVMEM_ASSIGN_OR_RETURN(std::optional<AgentKey> key, Recover(s.store(), space));
    // A directory not under its keyed name was written before names were keyed
    // (LegacyAgentDirName) or under a secret since lost; its manifest says whose it is, so it
    // moves to the name Load will look for. A name already taken is left alone: List then
    // reports the directory as another agent's.
    if (!key || !ValidateAgentKey(*key).ok()) continue;
    const Space want = s.AgentSpace(*key);
    if (want.name == space.name) continue;
    Status moved = static_cast<LocalBackend&>(s.store()).RenameSpace(space, want);
    if (!moved.ok() && moved.code() != ErrorCode::kFailedPrecondition) return moved;
  }
  return Status::Ok();
}

Result<AgentStore::State::FenceHold> AgentStore::State::FenceHold::Take(State& s,
                                                                        const Space& space) {
  if (!s.store().shared()) return FenceHold(nullptr, space, "");
  {
    std::lock_guard<std::mutex> l(s.mu);
    auto it = s.leases.find(space.name);
    if (it != s.leases.end()) return FenceHold(nullptr, space, it->second);
  }
  KVMEM_ASSIGN_OR_RETURN(std::string token, s.store().AcquireLease(space, s.options.lease_wait));
  return FenceHold(&s, space, std::move(token));
}

AgentStore::State::FenceHold::~FenceHold() {
  if (s_ != nullptr) s_->store().ReleaseLease(space_, token_);
}

namespace {

// $<xdg_var>/kvmem<tail> when it is an absolute path, else $HOME/<home_base>/kvmem<tail>.
Result<std::string> UserDir(const char* xdg_var, const char* home_base, const char* tail,
                            std::string_view what) {
  const char* xdg = std::getenv(xdg_var);
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/kvmem" + tail;
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') {
    return std::string(home) + "/" + home_base + "/kvmem" + tail;
  }
  return NotFound("no " + std::string(what) + ": neither " + xdg_var +
                  " nor HOME is an absolute path");
}

}  // namespace

Result<std::string> DefaultStoreRoot() {
  return UserDir("XDG_DATA_HOME", ".local/share", "", "store directory");
}

Result<std::string> DefaultStoreCacheDir() {
  return UserDir("XDG_CACHE_HOME", ".cache", "/store-cache", "store cache directory");
}

AgentLease::AgentLease(AgentLease&& o) noexcept
    : store_(std::exchange(o.store_, nullptr)), key_(std::move(o.key_)) {}

AgentLease::~AgentLease() {
  if (store_ == nullptr) return;
  AgentStore::State& s = *store_->state_;
  const Space space = s.AgentSpace(key_);
  std::string token;
  {
    std::lock_guard<std::mutex> l(s.mu);
    auto it = s.leases.find(space.name);
    if (it == s.leases.end()) return;
    token = std::move(it->second);
    s.leases.erase(it);
  }
  s.store().ReleaseLease(space, token);
}

AgentStore::AgentStore(std::unique_ptr<State> state) : state_(std::move(state)) {}
AgentStore::AgentStore(AgentStore&&) noexcept = default;
AgentStore& AgentStore::operator=(AgentStore&&) noexcept = default;
AgentStore::~AgentStore() = default;

const std::string& AgentStore::model_dir() const { return state_->model_dir; }
std::string AgentStore::AgentDir(const AgentKey& key) const {
  return state_->store().Where(state_->AgentSpace(key), "");
}

Result<AgentStore> AgentStore::Open(StoreOptions options) {
  if (!IsXxh128Hex(options.model_fingerprint)) {
    return InvalidArgument("model fingerprint '" + options.model_fingerprint +
                           "' is not 32 hex digits (ModelFingerprint)");
  }
  if (options.n_vocab <= 0) return InvalidArgument("n_vocab must be positive");
  if (options.root.empty()) return InvalidArgument("store root is empty");
  if (options.file_ops == nullptr) return InvalidArgument("store file_ops is null");
  auto state = std::make_unique<State>();
  KVMEM_ASSIGN_OR_RETURN(state->backend, OpenBackend(options, &state->model_dir));
  state->options = std::move(options);
  KVMEM_ASSIGN_OR_RETURN(state->name_secret, LoadOrCreateNameSecret(state->store()));
  if (!state->store().shared()) KVMEM_RETURN_IF_ERROR(state->RecoverLocal());
  return AgentStore(std::move(state));
}

bool AgentStore::shared() const { return state_->store().shared(); }

Result<AgentLease> AgentStore::Lease(const AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const Space space = state_->AgentSpace(key);
  {
    std::lock_guard<std::mutex> l(state_->mu);
    if (state_->leases.count(space.name)) {
      return FailedPrecondition("agent " + AgentLabel(key) + " is leased already");
    }
  }
  KVMEM_ASSIGN_OR_RETURN(std::string token,
                         state_->store().AcquireLease(space, state_->options.lease_wait));
  std::lock_guard<std::mutex> l(state_->mu);
  state_->leases[space.name] = std::move(token);
  return AgentLease(this, key);
}

Result<int64_t> AgentStore::Version(const AgentKey& key) const {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  return state_->store().Version(state_->AgentSpace(key));
}

Result<SaveStats> AgentStore::Save(const AgentKey& key, const kv::KvSequence& seq,
                                   std::span<const int32_t> tokens, std::string_view text,
                                   std::span<const size_t> token_text_ends,
                                   const MemoryRecord& memory) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const std::string where = "saving agent " + AgentLabel(key);
  if (static_cast<int64_t>(tokens.size()) != seq.n_rows()) {
    return InvalidArgument(where + ": " + std::to_string(tokens.size()) +
                           " token ids for a sequence of " + std::to_string(seq.n_rows()) +
                           " rows");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= state_->options.n_vocab) {
      return OutOfRange(
          where + ": token_ids[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) +
          " is outside the vocabulary (n_vocab " + std::to_string(state_->options.n_vocab) + ")");
    }
  }
  if (!token_text_ends.empty()) {
    if (token_text_ends.size() != tokens.size() ||
        !std::is_sorted(token_text_ends.begin(), token_text_ends.end()) ||
        token_text_ends.back() > text.size()) {
      return InvalidArgument(where + ": token_text_ends must hold one non-decreasing offset " +
                             "per token, within the text");
    }
  }
  const kv::KvPool& pool = *seq.pool();
  const int block_rows = pool.geometry().block_rows;
  const Space space = state_->AgentSpace(key);
  StoreBackend& store = state_->store();
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(space.name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  Result<State::FenceHold> fence = State::FenceHold::Take(*state_, space);
  if (!fence.ok()) return fence.status().WithContext(where);

  AgentManifest m;
  m.key = key;
  m.model_fingerprint = state_->options.model_fingerprint;
  m.formats = pool.formats();
  m.geometry = pool.geometry();
  m.tokens.assign(tokens.begin(), tokens.end());
  m.text = text;
  m.last_use_unix_ms = NowUnixMs();
  m.memory = memory;
  SaveStats stats;
  for (size_t i = 0; i < seq.blocks().size(); ++i) {
    const int64_t first = static_cast<int64_t>(i) * block_rows;
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(block_rows, seq.n_rows() - first));
    BlockIdentity id{m.model_fingerprint, tokens.subspan(first, n), std::nullopt};
    if (!token_text_ends.empty()) {
      id.text_span = {first == 0 ? 0 : token_text_ends[first - 1], token_text_ends[first + n - 1]};
    }
    Result<EncodedBlock> e = EncodeBlock(pool, seq.blocks()[i], n, id);
    if (!e.ok()) return e.status().WithContext(where + ", block " + std::to_string(i));
    const std::string name = e->file_name();
    // Content-addressed: a file of this name and size already holds these bytes.
    const Result<uint64_t> have = store.Size(space, name);
    if (have.ok() && *have == e->bytes()) {
      ++stats.blocks_reused;
    } else {
      KVMEM_RETURN_IF_ERROR(store.Put(space, name, e->pieces(), fence->token()).WithContext(where));
      ++stats.blocks_written;
      stats.bytes_written += e->bytes();
    }
    m.blocks.push_back({name, n, e->first_pos(), e->checksum(), e->bytes(), e->released_layers()});
  }
  const std::string json = ManifestToJson(m);
  Result<int64_t> version =
      store.Publish(space, kManifestName,
                    {reinterpret_cast<const uint8_t*>(json.data()), json.size()}, fence->token());
  if (!version.ok()) return version.status().WithContext(where);
  stats.version = *version;
  stats.bytes_written += json.size();
  // Only now, with the new manifest durable, are the old turn's blocks garbage.
  stats.files_removed = RemoveUnreferencedBlocks(store, space, m.blocks, fence->token());
  return stats;
}

Result<MemoryRecord> AgentStore::ReadMemory(const AgentKey& key) const {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const Space space = state_->AgentSpace(key);
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(space.name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  KVMEM_ASSIGN_OR_RETURN(AgentManifest m, ReadManifest(state_->store(), space));
  return std::move(m.memory);
}

Result<std::vector<AgentInfo>> AgentStore::List() const {
  const StoreBackend& store = state_->store();
  KVMEM_ASSIGN_OR_RETURN(std::vector<Space> spaces, store.Spaces());
  std::vector<AgentInfo> out;
  for (const Space& space : spaces) {
    AgentInfo info;
    Result<AgentManifest> m = ReadManifest(store, space);
    if (m.ok() && (state_->DirName(m->key) != space.name ||
                   (store.shared() && m->key.tenant != space.tenant))) {
      m = Corrupt("manifest in '" + store.Where(space, "") + "' names agent " + AgentLabel(m->key) +
                  ", whose space is another");
    }
    if (!m.ok()) {
      if (m.status().code() == ErrorCode::kNotFound) continue;  // being deleted or never saved
      info.status = m.status();
    } else {
      info.key = m->key;
      info.n_tokens = static_cast<int64_t>(m->tokens.size());
      info.formats = m->formats;
      info.last_use_unix_ms = m->last_use_unix_ms;
      info.memory = std::move(m->memory);
      info.memory.state = Json::object();
    }
    Result<std::vector<std::string>> names = store.List(space);
    if (names.ok()) {
      for (const std::string& n : *names) {
        const Result<uint64_t> size = store.Size(space, n);
        if (size.ok()) info.bytes_on_disk += *size;
      }
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const AgentInfo& a, const AgentInfo& b) {
    if (a.status.ok() != b.status.ok()) return a.status.ok();
    return std::tie(a.key.tenant, a.key.id) < std::tie(b.key.tenant, b.key.id);
  });
  return out;
}

Status AgentStore::Delete(const AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const Space space = state_->AgentSpace(key);
  StoreBackend& store = state_->store();
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(space.name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  KVMEM_ASSIGN_OR_RETURN(State::FenceHold fence, State::FenceHold::Take(*state_, space));
  // The manifest first, durably: the agent is gone even if a crash follows.
  Status removed = store.Remove(space, kManifestName, fence.token());
  if (removed.code() == ErrorCode::kNotFound) {
    return NotFound("agent " + AgentLabel(key) + " has no stored cache");
  }
  KVMEM_RETURN_IF_ERROR(removed);
  return store.RemoveSpace(space, fence.token());
}

bool AgentStore::Contains(const AgentKey& key) const {
  if (!ValidateAgentKey(key).ok()) return false;
  return state_->store().Size(state_->AgentSpace(key), kManifestName).ok();
}

}  // namespace kvmem::memory::store
