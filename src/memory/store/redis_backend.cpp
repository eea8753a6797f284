#include "memory/store/redis_backend.h"

#include <hiredis/hiredis.h>
#include <sys/random.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/log.h"
#include "memory/store/hash.h"

namespace kvmem::memory::store {
namespace {

using Clock = std::chrono::steady_clock;

// Every mutation checks the fence first (ARGV[1]; empty: a space without leases).
// Put/Publish. KEYS: lease, object, index, spaces, version. ARGV: fence, bytes, object name,
// "tenant:name" (empty for the root space), "1" to publish.
constexpr std::string_view kPutScript = R"(
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[4] ~= '' then
  redis.call('SADD', KEYS[3], ARGV[3])
  redis.call('SADD', KEYS[4], ARGV[4])
end
if ARGV[5] == '1' then return redis.call('INCR', KEYS[5]) end
return 0)";
// Remove. KEYS: lease, object, index. ARGV: fence, object name. 1 removed, 0 none, -1 fenced.
constexpr std::string_view kRemoveScript = R"(
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('SREM', KEYS[3], ARGV[2])
return redis.call('DEL', KEYS[2]))";
// RemoveSpace. KEYS: lease, index, spaces, version. ARGV: fence, object key prefix, member.
constexpr std::string_view kRemoveSpaceScript = R"(
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do redis.call('DEL', ARGV[2] .. name) end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[3])
return redis.call('INCR', KEYS[4]))";
// Lease renewal and release. KEYS: lease. ARGV: token, ttl ms.
constexpr std::string_view kRenewScript = R"(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0)";
constexpr std::string_view kReleaseScript = R"(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0)";

timeval ToTimeval(std::chrono::milliseconds ms) {
  return {static_cast<time_t>(ms.count() / 1000),
          static_cast<suseconds_t>(ms.count() % 1000) * 1000};
}

std::string RandomHex() {
  uint8_t b[12];
  if (::getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) {
    const uint64_t t = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    std::memcpy(b, &t, sizeof t);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s += kHex[x >> 4];
    s += kHex[x & 15];
  }
  return s;
}

bool IsBlockObject(std::string_view name) { return name.starts_with("kv-"); }

Status Fenced(const std::string& where) {
  return FailedPrecondition(where + ": this server's lease on the agent has passed to another " +
                            "(a turn took longer than the lease, or the server stalled)");
}

class BytesBlob final : public Blob {
 public:
  BytesBlob(std::shared_ptr<const std::string> bytes, std::string where)
      : bytes_(std::move(bytes)), where_(std::move(where)) {}
  uint64_t size() const override { return bytes_->size(); }
  const std::string& where() const override { return where_; }
  Status ReadAt(uint64_t offset, std::span<uint8_t> dst) const override {
    if (offset > bytes_->size() || dst.size() > bytes_->size() - offset) {
      return Corrupt("'" + where_ + "' ends before byte " + std::to_string(offset + dst.size()));
    }
    std::memcpy(dst.data(), bytes_->data() + offset, dst.size());
    return Status::Ok();
  }

 private:
  std::shared_ptr<const std::string> bytes_;
  std::string where_;
};

}  // namespace

struct RedisBackend::Reply {
  int type = REDIS_REPLY_NIL;
  long long integer = 0;
  std::string str;
  std::vector<std::string> elements;  // string elements of an array
};

class RedisBackend::Connection {
 public:
  explicit Connection(redisContext* c) : c_(c) {}
  ~Connection() { redisFree(c_); }
  redisContext* get() const { return c_; }

 private:
  redisContext* c_;
};

bool IsRedisUrl(std::string_view s) { return s.starts_with("redis://"); }

Result<RedisOptions> ParseRedisUrl(std::string_view url) {
  const std::string bad = "store URL '" + std::string(url) + "' is not redis://HOST[:PORT][/DB]";
  if (!IsRedisUrl(url)) return InvalidArgument(bad);
  std::string_view rest = url.substr(8);
  RedisOptions o;
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), o.db);
      if (ec != std::errc() || p != db.data() + db.size() || o.db < 0 || o.db > 15) {
        return InvalidArgument(bad + " (DB is 0..15)");
      }
    }
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = rest.substr(colon + 1);
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), o.port);
    if (ec != std::errc() || p != port.data() + port.size() || o.port < 1 || o.port > 65535) {
      return InvalidArgument(bad + " (PORT is 1..65535)");
    }
    rest = rest.substr(0, colon);
  }
  if (rest.empty() || rest.find_first_of("@?#") != std::string_view::npos) {
    return InvalidArgument(bad);
  }
  o.host = std::string(rest);
  return o;
}

RedisBackend::RedisBackend(RedisOptions options, std::string prefix,
                           std::unique_ptr<DiskCache> disk)
    : options_(std::move(options)), prefix_(std::move(prefix)), disk_(std::move(disk)) {}

Result<std::unique_ptr<RedisBackend>> RedisBackend::Open(RedisOptions options,
                                                         std::string model_fingerprint) {
  std::unique_ptr<DiskCache> disk;
  if (!options.cache_dir.empty()) {
    KVMEM_ASSIGN_OR_RETURN(disk, DiskCache::Open(options.cache_dir, options.cache_dir_bytes));
  }
  std::unique_ptr<RedisBackend> b(
      new RedisBackend(std::move(options), "kvmem:" + model_fingerprint + ":", std::move(disk)));
  Result<Reply> ping = b->Command({"PING"});
  if (!ping.ok()) return Unavailable(ping.status().message());
  b->renewer_ = std::thread([p = b.get()] { p->RenewLoop(); });
  return b;
}

RedisBackend::~RedisBackend() {
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    stopping_ = true;
  }
  lease_cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
}

std::string RedisBackend::Describe() const {
  return "redis://" + options_.host + ":" + std::to_string(options_.port) + "/" +
         std::to_string(options_.db);
}

std::string RedisBackend::SpaceKey(const Space& space) const {
  return prefix_ + space.tenant + ":" + space.name;
}

std::string RedisBackend::ObjectKey(const Space& space, std::string_view name) const {
  return SpaceKey(space) + ":" + std::string(name);
}

std::string RedisBackend::Where(const Space& space, std::string_view name) const {
  return Describe() + " " + ObjectKey(space, name);
}

Result<std::unique_ptr<RedisBackend::Connection>> RedisBackend::Connect() const {
  const std::string where = Describe();
  redisContext* c =
      redisConnectWithTimeout(options_.host.c_str(), options_.port, ToTimeval(options_.timeout));
  if (c == nullptr) return IoError(where + ": cannot allocate a connection");
  auto conn = std::make_unique<Connection>(c);
  if (c->err != 0) return IoError(where + ": " + c->errstr);
  if (redisSetTimeout(c, ToTimeval(options_.timeout)) != REDIS_OK) {
    return IoError(where + ": cannot set the command timeout");
  }
  if (options_.db != 0) {
    const std::string db = std::to_string(options_.db);
    redisReply* r = static_cast<redisReply*>(redisCommand(c, "SELECT %s", db.c_str()));
    const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
    if (r != nullptr) freeReplyObject(r);
    if (!ok) return IoError(where + ": SELECT " + db + " failed");
  }
  return conn;
}

Result<RedisBackend::Reply> RedisBackend::Command(const std::vector<std::string_view>& args) const {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  redisReply* r = nullptr;
  std::unique_ptr<Connection> conn;
  // A pooled connection the server closed meanwhile (it restarted, or timed the client out)
  // fails before the command reaches it: then the pool, closed alike, is dropped and the
  // command runs once more on a new connection. A timeout is not retried (the command may have
  // run).
  for (int attempt = 0; attempt < 2 && r == nullptr; ++attempt) {
    bool pooled = false;
    {
      std::lock_guard<std::mutex> l(pool_mu_);
      if (attempt == 1) idle_.clear();
      if (!idle_.empty()) {
        conn = std::move(idle_.back());
        idle_.pop_back();
        pooled = true;
      }
    }
    if (!conn) {
      KVMEM_ASSIGN_OR_RETURN(conn, Connect());
    }
    r = static_cast<redisReply*>(
        redisCommandArgv(conn->get(), static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r != nullptr) break;
    const int e = errno;
    const int err = conn->get()->err;
    const std::string why = err != 0 ? conn->get()->errstr : "no reply";
    const bool closed =
        err == REDIS_ERR_EOF || (err == REDIS_ERR_IO && (e == EPIPE || e == ECONNRESET));
    conn.reset();  // unusable either way
    if (!pooled || !closed || attempt == 1) {
      return IoError(Describe() + ": " + std::string(args[0]) + ": " + why);
    }
  }
  Reply out;
  out.type = r->type;
  out.integer = r->integer;
  if (r->str != nullptr) out.str.assign(r->str, r->len);
  for (size_t i = 0; i < r->elements; ++i) {
    if (r->element[i]->str != nullptr)
      out.elements.emplace_back(r->element[i]->str, r->element[i]->len);
  }
  freeReplyObject(r);
  {
    std::lock_guard<std::mutex> l(pool_mu_);
    idle_.push_back(std::move(conn));
  }
  if (out.type == REDIS_REPLY_ERROR) {
    return IoError(Describe() + ": " + std::string(args[0]) + ": " + out.str);
  }
  return out;
}

Result<int64_t> RedisBackend::Write(const Space& space, std::string_view name,
                                    std::string_view bytes, std::string_view fence, bool publish) {
  const std::string sk = SpaceKey(space);
  const std::string lease = sk + "#lease", object = ObjectKey(space, name),
                    version = sk + "#version";
  const std::string spaces = prefix_ + "spaces";
  const std::string member = space.name.empty() ? "" : space.tenant + ":" + space.name;
  KVMEM_ASSIGN_OR_RETURN(
      Reply r, Command({"EVAL", kPutScript, "5", lease, object, sk, spaces, version, fence, bytes,
                        name, member, publish ? "1" : "0"}));
  if (r.integer < 0) return Fenced("writing " + Where(space, name));
  Forget(object);
  return static_cast<int64_t>(r.integer);
}

Status RedisBackend::Put(const Space& space, std::string_view name, Pieces pieces,
                         std::string_view fence) {
  std::string bytes;
  for (std::span<const uint8_t> p : pieces)
    bytes.append(reinterpret_cast<const char*>(p.data()), p.size());
  return Write(space, name, bytes, fence, false).status();
}

Result<int64_t> RedisBackend::Publish(const Space& space, std::string_view name,
                                      std::span<const uint8_t> bytes, std::string_view fence) {
  return Write(space, name, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, fence,
               true);
}

Result<bool> RedisBackend::PutIfAbsent(const Space& space, std::string_view name,
                                       std::span<const uint8_t> bytes) {
  if (!space.name.empty()) return InvalidArgument("PutIfAbsent is for the root space");
  KVMEM_ASSIGN_OR_RETURN(Reply r,
                         Command({"SET",
                                  ObjectKey(space, name),
                                  {reinterpret_cast<const char*>(bytes.data()), bytes.size()},
                                  "NX"}));
  return r.type == REDIS_REPLY_STATUS;
}

Result<std::unique_ptr<Blob>> RedisBackend::Open(const Space& space, std::string_view name) const {
  const std::string key = ObjectKey(space, name);
  const bool block = IsBlockObject(name);
  if (block) {
    std::lock_guard<std::mutex> l(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ++hits_;
      return std::unique_ptr<Blob>(new BytesBlob(it->second.bytes, Where(space, name)));
    }
  }
  if (block && disk_ != nullptr) {
    if (std::shared_ptr<const std::string> bytes = disk_->Get(key)) {
      Remember(key, bytes);
      std::lock_guard<std::mutex> l(cache_mu_);
      ++disk_hits_;
      return std::unique_ptr<Blob>(new BytesBlob(std::move(bytes), Where(space, name)));
    }
  }
  KVMEM_ASSIGN_OR_RETURN(Reply r, Command({"GET", key}));
  if (r.type == REDIS_REPLY_NIL) return NotFound("'" + Where(space, name) + "' does not exist");
  auto bytes = std::make_shared<const std::string>(std::move(r.str));
  if (block) {
    if (disk_ != nullptr) disk_->Put(key, *bytes);
    Remember(key, bytes);
    std::lock_guard<std::mutex> l(cache_mu_);
    ++misses_;
  }
  return std::unique_ptr<Blob>(new BytesBlob(std::move(bytes), Where(space, name)));
}

void RedisBackend::Remember(const std::string& key,
                            std::shared_ptr<const std::string> bytes) const {
  if (bytes->size() > options_.cache_bytes) return;
  std::lock_guard<std::mutex> l(cache_mu_);
  if (cache_.count(key)) return;
  lru_.push_front(key);
  cache_used_ += bytes->size();
  cache_[key] = {std::move(bytes), lru_.begin()};
  while (cache_used_ > options_.cache_bytes) {
    auto victim = cache_.find(lru_.back());
    cache_used_ -= victim->second.bytes->size();
    cache_.erase(victim);
    lru_.pop_back();
  }
}

Result<uint64_t> RedisBackend::Size(const Space& space, std::string_view name) const {
  const std::string key = ObjectKey(space, name);
  KVMEM_ASSIGN_OR_RETURN(Reply n, Command({"STRLEN", key}));
  if (n.integer == 0) {
    KVMEM_ASSIGN_OR_RETURN(Reply e, Command({"EXISTS", key}));
    if (e.integer == 0) return NotFound("'" + Where(space, name) + "' does not exist");
  }
  return static_cast<uint64_t>(n.integer);
}

Status RedisBackend::Remove(const Space& space, std::string_view name, std::string_view fence) {
  const std::string sk = SpaceKey(space);
  const std::string key = ObjectKey(space, name);
  KVMEM_ASSIGN_OR_RETURN(
      Reply r, Command({"EVAL", kRemoveScript, "3", sk + "#lease", key, sk, fence, name}));
  if (r.integer < 0) return Fenced("removing " + Where(space, name));
  Forget(key);
  if (r.integer == 0) return NotFound("'" + Where(space, name) + "' does not exist");
  return Status::Ok();
}

void RedisBackend::Forget(const std::string& key) const {
  if (disk_ != nullptr && IsBlockObject(key.substr(key.rfind(':') + 1))) disk_->Remove(key);
  std::lock_guard<std::mutex> l(cache_mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return;
  cache_used_ -= it->second.bytes->size();
  lru_.erase(it->second.lru);
  cache_.erase(it);
}

Result<std::vector<std::string>> RedisBackend::List(const Space& space) const {
  KVMEM_ASSIGN_OR_RETURN(Reply r, Command({"SMEMBERS", SpaceKey(space)}));
  if (r.elements.empty()) return NotFound("space '" + SpaceKey(space) + "' does not exist");
  return std::move(r.elements);
}

Result<std::vector<Space>> RedisBackend::Spaces() const {
  KVMEM_ASSIGN_OR_RETURN(Reply r, Command({"SMEMBERS", prefix_ + "spaces"}));
  std::vector<Space> out;
  for (const std::string& m : r.elements) {
    const size_t colon = m.find(':');
    if (colon == std::string::npos) continue;
    Space s{m.substr(0, colon), m.substr(colon + 1)};
    if (IsXxh128Hex(s.name)) {
      out.push_back(std::move(s));
    }
  }
  return out;
}

Status RedisBackend::RemoveSpace(const Space& space, std::string_view fence) {
  if (space.name.empty()) return InvalidArgument("the root space cannot be removed");
  const std::string sk = SpaceKey(space);
  KVMEM_ASSIGN_OR_RETURN(
      Reply r, Command({"EVAL", kRemoveSpaceScript, "4", sk + "#lease", sk, prefix_ + "spaces",
                        sk + "#version", fence, sk + ":", space.tenant + ":" + space.name}));
  if (r.integer < 0) return Fenced("removing " + sk);
  return Status::Ok();
}

Result<int64_t> RedisBackend::Version(const Space& space) const {
  KVMEM_ASSIGN_OR_RETURN(Reply r, Command({"GET", SpaceKey(space) + "#version"}));
  if (r.type == REDIS_REPLY_NIL) return int64_t{0};
  int64_t v = 0;
  auto [p, ec] = std::from_chars(r.str.data(), r.str.data() + r.str.size(), v);
  if (ec != std::errc() || p != r.str.data() + r.str.size()) {
    return Corrupt(SpaceKey(space) + "#version holds '" + r.str + "', not a number");
  }
  return v;
}

Result<std::string> RedisBackend::AcquireLease(const Space& space, std::chrono::milliseconds wait) {
  const std::string sk = SpaceKey(space);
  const std::string lease = sk + "#lease";
  KVMEM_ASSIGN_OR_RETURN(Reply n, Command({"INCR", sk + "#fence"}));
  const std::string token = std::to_string(n.integer) + ":" + RandomHex();
  const std::string ttl = std::to_string(options_.lease_ttl.count());
  const auto deadline = Clock::now() + wait;
  for (;;) {
    KVMEM_ASSIGN_OR_RETURN(Reply r, Command({"SET", lease, token, "NX", "PX", ttl}));
    if (r.type == REDIS_REPLY_STATUS) break;
    if (Clock::now() >= deadline) {
      return Unavailable("agent is busy: another server holds its lease (" + Describe() + " " +
                         lease + "); retry later");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    held_[lease] = token;
  }
  return token;
}

void RedisBackend::ReleaseLease(const Space& space, std::string_view token) {
  const std::string lease = SpaceKey(space) + "#lease";
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    auto it = held_.find(lease);
    if (it != held_.end() && it->second == token) held_.erase(it);
  }
  Result<Reply> r = Command({"EVAL", kReleaseScript, "1", lease, token});
  if (!r.ok()) {  // it expires by itself
    KVMEM_LOG_WARN("releasing lease %s: %s", lease.c_str(), r.status().ToString().c_str());
  }
}

void RedisBackend::RenewLoop() {
  std::unique_lock<std::mutex> l(lease_mu_);
  const std::string ttl = std::to_string(options_.lease_ttl.count());
  while (!lease_cv_.wait_for(l, options_.lease_ttl / 3, [&] { return stopping_; })) {
    const std::map<std::string, std::string> held = held_;
    l.unlock();
    for (const auto& [lease, token] : held) {
      Result<Reply> r = Command({"EVAL", kRenewScript, "1", lease, token, ttl});
      if (!r.ok() || r->integer == 0) {
        KVMEM_LOG_WARN("lease %s could not be renewed (%s): this server's turn on it will fail",
                       lease.c_str(), r.ok() ? "held by another" : r.status().ToString().c_str());
      }
    }
    l.lock();
  }
}

int64_t RedisBackend::cache_hits() const {
  std::lock_guard<std::mutex> l(cache_mu_);
  return hits_;
}

int64_t RedisBackend::disk_hits() const {
  std::lock_guard<std::mutex> l(cache_mu_);
  return disk_hits_;
}

int64_t RedisBackend::cache_misses() const {
  std::lock_guard<std::mutex> l(cache_mu_);
  return misses_;
}

}  // namespace kvmem::memory::store
