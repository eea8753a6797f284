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

#include "memory/store/agent_store_state.h"
#include "memory/store/atomic_file.h"
#include "memory/store/block_file.h"
#include "memory/store/hash.h"

namespace kvmem::memory::store {
namespace {

constexpr size_t kModelDirHexLen = 16;
constexpr std::string_view kNameSecretFile = "name-secret";

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Makes an agent directory whole again after a crash: temp files and blocks no manifest names
// go; a directory without a manifest (a first save or a Delete cut short) goes entirely. Returns the
// key its manifest names, if it has a readable one.
Result<std::optional<AgentKey>> Recover(FileOps& fs, const std::string& dir) {
  KVMEM_RETURN_IF_ERROR(RemoveLeftoverTemps(dir, fs).status());
  Result<AgentManifest> m = ReadManifest(fs, dir);
  if (m.ok()) {
    RemoveUnreferencedBlocks(fs, dir, m->blocks);
    return std::optional<AgentKey>(std::move(m->key));
  }
  if (m.status().code() != ErrorCode::kNotFound) return std::optional<AgentKey>();  // kept
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir, fs));
  for (const std::string& n : names) {
    if (IsBlockFileName(n)) fs.Unlink((dir + "/" + n).c_str());
  }
  for (const std::string& id : CheckpointIds(names)) {  // a Delete the crash interrupted
    fs.Unlink((dir + "/" + CheckpointFile(id)).c_str());
  }
  fs.Rmdir(dir.c_str());  // fails harmlessly if something else lives there
  return std::optional<AgentKey>();
}

// The store's secret for agent directory names (agent_id.h), created on first use. Called with
// the model directory's lock held, so two processes never create it at once.
Result<NameSecret> LoadOrCreateNameSecret(FileOps& fs, const std::string& model_dir) {
  std::vector<uint8_t> bytes;
  Status read = ReadFileNoFollow(model_dir, kNameSecretFile, kNameSecretBytes, &bytes, fs);
  NameSecret secret{};
  if (read.ok()) {
    if (bytes.size() != secret.size()) {
      return Corrupt("'" + model_dir + "/" + std::string(kNameSecretFile) + "' holds " +
                     std::to_string(bytes.size()) + " bytes, expected " +
                     std::to_string(secret.size()));
    }
    std::copy(bytes.begin(), bytes.end(), secret.begin());
    return secret;
  }
  if (read.code() != ErrorCode::kNotFound) return read;
  if (::getrandom(secret.data(), secret.size(), 0) != static_cast<ssize_t>(secret.size())) {
    return IoError(std::string("getrandom: ") + std::strerror(errno));
  }
  KVMEM_RETURN_IF_ERROR(WriteFileAtomic(model_dir, kNameSecretFile, secret, fs));
  return secret;
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size)
                                                                : 0;
}

}  // namespace

std::string AgentLabel(const AgentKey& key) { return "'" + key.tenant + "/" + key.id + "'"; }

Result<AgentManifest> ReadManifest(FileOps& fs, const std::string& dir, std::string_view file) {
  std::vector<uint8_t> bytes;
  KVMEM_RETURN_IF_ERROR(ReadFileNoFollow(dir, file, kMaxManifestBytes, &bytes, fs));
  Result<AgentManifest> m =
      ParseManifest({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  if (!m.ok()) return m.status().WithContext("manifest '" + dir + "/" + std::string(file) + "'");
  return m;
}

bool IsBlockFileName(std::string_view name) {
  constexpr std::string_view kPre = "kv-", kSuf = ".safetensors";
  return name.size() == kPre.size() + kXxh128HexLen + kSuf.size() && name.starts_with(kPre) &&
         name.ends_with(kSuf) && IsXxh128Hex(name.substr(kPre.size(), kXxh128HexLen));
}

int RemoveUnreferencedBlocks(FileOps& fs, const std::string& dir,
                             const std::vector<BlockEntry>& keep) {
  Result<std::vector<std::string>> names = ListDir(dir, fs);
  if (!names.ok()) return 0;
  std::set<std::string> kept;
  for (const BlockEntry& b : keep) kept.insert(b.file);
  for (const std::string& id : CheckpointIds(*names)) {
    Result<AgentManifest> c = ReadManifest(fs, dir, CheckpointFile(id));
    if (!c.ok()) return 0;
    for (const BlockEntry& b : c->blocks) kept.insert(b.file);
  }
  int removed = 0;
  for (const std::string& n : *names) {
    if (IsBlockFileName(n) && !kept.count(n) && fs.Unlink((dir + "/" + n).c_str()) == 0) ++removed;
  }
  return removed;
}

AgentStore::State::~State() {
  if (lock_fd >= 0) ::close(lock_fd);  // releases the flock
}

std::shared_ptr<std::mutex> AgentStore::State::AgentLock(const std::string& dir_name) {
  std::lock_guard<std::mutex> g(mu);
  std::shared_ptr<std::mutex>& m = agent_locks[dir_name];
  if (!m) m = std::make_shared<std::mutex>();
  return m;
}

Result<std::string> DefaultStoreRoot() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/kvmem";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.local/share/kvmem";
  return NotFound("no store directory: neither XDG_DATA_HOME nor HOME is an absolute path");
}

AgentStore::AgentStore(std::unique_ptr<State> state) : state_(std::move(state)) {}
AgentStore::AgentStore(AgentStore&&) noexcept = default;
AgentStore& AgentStore::operator=(AgentStore&&) noexcept = default;
AgentStore::~AgentStore() = default;

const std::string& AgentStore::model_dir() const { return state_->model_dir; }
std::string AgentStore::AgentDir(const AgentKey& key) const {
  return state_->AgentDir(state_->DirName(key));
}

Result<AgentStore> AgentStore::Open(StoreOptions options) {
  if (!IsXxh128Hex(options.model_fingerprint)) {
    return InvalidArgument("model fingerprint '" + options.model_fingerprint +
                           "' is not 32 hex digits (ModelFingerprint)");
  }
  if (options.n_vocab <= 0) return InvalidArgument("n_vocab must be positive");
  if (options.root.empty()) return InvalidArgument("store root is empty");
  std::error_code ec;
  std::filesystem::create_directories(options.root, ec);
  if (ec) return IoError("create store root '" + options.root + "': " + ec.message());

  if (options.file_ops == nullptr) return InvalidArgument("store file_ops is null");
  FileOps& fs = *options.file_ops;
  auto state = std::make_unique<State>();
  state->model_dir = options.root + "/" + options.model_fingerprint.substr(0, kModelDirHexLen);
  KVMEM_RETURN_IF_ERROR(MakeDir(state->model_dir, fs));
  const std::string lock = state->model_dir + "/.lock";
  state->lock_fd = fs.Open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (state->lock_fd < 0) return IoError("open '" + lock + "': " + std::strerror(errno));
  if (::flock(state->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Unavailable("agent store '" + state->model_dir + "' is in use by another process");
    }
    return IoError("lock '" + lock + "': " + std::strerror(errno));
  }
  state->options = std::move(options);

  KVMEM_ASSIGN_OR_RETURN(state->name_secret, LoadOrCreateNameSecret(fs, state->model_dir));

  KVMEM_RETURN_IF_ERROR(RemoveLeftoverTemps(state->model_dir, fs).status());
  KVMEM_RETURN_IF_ERROR(RecoverResponses(state->model_dir));
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(state->model_dir, fs));
  bool renamed = false;
  for (const std::string& n : names) {
    if (!IsXxh128Hex(n)) continue;
    KVMEM_ASSIGN_OR_RETURN(std::optional<AgentKey> key, Recover(fs, state->AgentDir(n)));
    // A directory not under its keyed name was written before names were keyed
    // (LegacyAgentDirName) or under a secret since lost; its manifest says whose it is, so it
    // moves to the name Load will look for. A name already taken is left alone: List then
    // reports the directory as another agent's.
    if (!key || !ValidateAgentKey(*key).ok()) continue;
    const std::string want = state->DirName(*key);
    if (want == n) continue;
    if (fs.Rename(state->AgentDir(n).c_str(), state->AgentDir(want).c_str()) == 0) {
      renamed = true;
    } else if (errno != EEXIST && errno != ENOTEMPTY) {
      return IoError("rename '" + state->AgentDir(n) + "' to '" + want + "': " +
                     std::strerror(errno));
    }
  }
  if (renamed) KVMEM_RETURN_IF_ERROR(SyncDir(state->model_dir, fs));
  return AgentStore(std::move(state));
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
  const std::string dir_name = state_->DirName(key);
  const std::string dir = state_->AgentDir(dir_name);
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(dir_name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  KVMEM_RETURN_IF_ERROR(MakeDir(dir, state_->fs()).WithContext(where));

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
    if (FileSize(dir + "/" + name) == e->bytes()) {
      ++stats.blocks_reused;
    } else {
      KVMEM_RETURN_IF_ERROR(
          WriteFileAtomic(dir, name, e->pieces(), state_->fs()).WithContext(where));
      ++stats.blocks_written;
      stats.bytes_written += e->bytes();
    }
    m.blocks.push_back({name, n, e->first_pos(), e->checksum(), e->bytes(), e->released_layers()});
  }
  const std::string json = ManifestToJson(m);
  KVMEM_RETURN_IF_ERROR(
      WriteFileAtomic(dir, kManifestName,
                      {reinterpret_cast<const uint8_t*>(json.data()), json.size()}, state_->fs())
          .WithContext(where));
  stats.bytes_written += json.size();
  // Only now, with the new manifest durable, are the old turn's blocks garbage.
  stats.files_removed = RemoveUnreferencedBlocks(state_->fs(), dir, m.blocks);
  return stats;
}

Result<MemoryRecord> AgentStore::ReadMemory(const AgentKey& key) const {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const std::string dir_name = state_->DirName(key);
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(dir_name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  KVMEM_ASSIGN_OR_RETURN(AgentManifest m, ReadManifest(state_->fs(), state_->AgentDir(dir_name)));
  return std::move(m.memory);
}

Result<std::vector<AgentInfo>> AgentStore::List() const {
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(state_->model_dir, state_->fs()));
  std::vector<AgentInfo> out;
  for (const std::string& n : names) {
    if (!IsXxh128Hex(n)) continue;
    const std::string dir = state_->AgentDir(n);
    AgentInfo info;
    Result<AgentManifest> m = ReadManifest(state_->fs(), dir);
    if (m.ok() && state_->DirName(m->key) != n) {
      m = Corrupt("manifest in '" + dir + "' names agent " + AgentLabel(m->key) +
                  ", whose directory is another");
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
    Result<std::vector<std::string>> files = ListDir(dir, state_->fs());
    if (files.ok()) {
      for (const std::string& f : *files) info.bytes_on_disk += FileSize(dir + "/" + f);
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
  const std::string dir_name = state_->DirName(key);
  const std::string dir = state_->AgentDir(dir_name);
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(dir_name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  const std::string manifest = dir + "/" + std::string(kManifestName);
  FileOps& fs = state_->fs();
  if (fs.Unlink(manifest.c_str()) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return NotFound("agent " + AgentLabel(key) + " has no stored cache");
    return IoError("delete '" + manifest + "': " + std::strerror(errno));
  }
  KVMEM_RETURN_IF_ERROR(SyncDir(dir, fs));
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir, fs));
  for (const std::string& n : names) {
    const std::string p = dir + "/" + n;
    if (fs.Unlink(p.c_str()) != 0) return IoError("delete '" + p + "': " + std::strerror(errno));
  }
  if (fs.Rmdir(dir.c_str()) != 0) return IoError("remove '" + dir + "': " + std::strerror(errno));
  return SyncDir(state_->model_dir, fs);
}

bool AgentStore::Contains(const AgentKey& key) const {
  if (!ValidateAgentKey(key).ok()) return false;
  struct stat st {};
  const std::string manifest = AgentDir(key) + "/" + std::string(kManifestName);
  return ::lstat(manifest.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace kvmem::memory::store
