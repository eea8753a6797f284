#include "memory/store/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "memory/store/hash.h"

namespace kvmem::memory::store {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTmpMark = ".tmp.";
// A temporary file this old was left by a writer that died (a live one renames it at once).
constexpr auto kStaleTmp = std::chrono::minutes(10);
constexpr size_t kLenBytes = 4;

std::string Digest(std::string_view bytes, std::string_view key) {
  Xxh128Stream h;
  h.Update({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  h.Update({reinterpret_cast<const uint8_t*>(key.data()), key.size()});
  return h.HexDigest();
}

bool ReadWhole(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ok) {
    out->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out->size()) {
      const ssize_t n = ::read(fd, out->data() + got, out->size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ok = got == out->size();
  }
  ::close(fd);
  return ok;
}

bool WriteWhole(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The bytes a file stored for `key` holds before its trailer, or npos when it was not stored
// whole under that key.
size_t ObjectSize(std::string_view file, std::string_view key) {
  const size_t trailer = key.size() + kLenBytes + kXxh128HexLen;
  if (file.size() < trailer) return std::string_view::npos;
  const size_t n = file.size() - trailer;
  const auto* len = reinterpret_cast<const uint8_t*>(file.data() + n + key.size());
  const uint32_t stored_len = len[0] | len[1] << 8 | len[2] << 16 | uint32_t{len[3]} << 24;
  if (stored_len != key.size() || file.substr(n, key.size()) != key) return std::string_view::npos;
  const std::string_view digest = file.substr(file.size() - kXxh128HexLen);
  return digest == Digest(file.substr(0, n), key) ? n : std::string_view::npos;
}

}  // namespace

Result<std::unique_ptr<DiskCache>> DiskCache::Open(std::string dir, uint64_t max_bytes) {
  std::error_code ec;
  if (fs::create_directories(dir, ec)) fs::permissions(dir, fs::perms::owner_all, ec);
  if (ec) return IoError("create the store cache directory '" + dir + "': " + ec.message());
  std::unique_ptr<DiskCache> cache(new DiskCache(dir, max_bytes));
  struct Found {
    std::string name;
    uint64_t size;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e;
    if (!it->is_regular_file(e)) continue;
    const fs::file_time_type mtime = it->last_write_time(e);
    if (e) continue;
    if (IsXxh128Hex(name)) {
      const uint64_t size = it->file_size(e);
      if (!e) found.push_back({name, size, mtime});
    } else if (name.find(kTmpMark) != std::string::npos && now - mtime > kStaleTmp) {
      fs::remove(it->path(), e);
    }
  }
  if (ec) return IoError("list the store cache directory '" + dir + "': " + ec.message());
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(cache->mu_);
  for (const Found& f : found) cache->Touch(f.name, f.size);
  return cache;
}

std::shared_ptr<const std::string> DiskCache::Get(std::string_view key) {
  const std::string file = Xxh128Hex(key);
  std::string data;
  if (!ReadWhole(PathOf(file), &data)) {
    std::lock_guard<std::mutex> lock(mu_);
    Drop(file);  // gone (another process's bound, or a user), if it was known
    return nullptr;
  }
  const size_t n = ObjectSize(data, key);
  std::lock_guard<std::mutex> lock(mu_);
  if (n == std::string_view::npos) {
    ::unlink(PathOf(file).c_str());
    Drop(file);
    return nullptr;
  }
  Touch(file, data.size());
  data.resize(n);
  return std::make_shared<const std::string>(std::move(data));
}

void DiskCache::Put(std::string_view key, std::string_view bytes) {
  static std::atomic<uint64_t> serial{0};
  const std::string file = Xxh128Hex(key);
  const std::string tmp = PathOf(file) + std::string(kTmpMark) + std::to_string(::getpid()) + "." +
                          std::to_string(serial.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const auto n = static_cast<uint32_t>(key.size());
  const char len[kLenBytes] = {static_cast<char>(n), static_cast<char>(n >> 8),
                               static_cast<char>(n >> 16), static_cast<char>(n >> 24)};
  const bool ok = WriteWhole(fd, bytes) && WriteWhole(fd, key) &&
                  WriteWhole(fd, {len, kLenBytes}) && WriteWhole(fd, Digest(bytes, key));
  if (::close(fd) != 0 || !ok || ::rename(tmp.c_str(), PathOf(file).c_str()) != 0) {
    ::unlink(tmp.c_str());
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Touch(file, bytes.size() + key.size() + kLenBytes + kXxh128HexLen);
}

void DiskCache::Remove(std::string_view key) {
  const std::string file = Xxh128Hex(key);
  std::lock_guard<std::mutex> lock(mu_);
  ::unlink(PathOf(file).c_str());
  Drop(file);
}

uint64_t DiskCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

void DiskCache::Touch(const std::string& file, uint64_t size) {
  Drop(file);
  lru_.push_front(file);
  files_[file] = {size, lru_.begin()};
  used_ += size;
  while (used_ > max_bytes_ && !lru_.empty()) {
    const std::string victim = lru_.back();
    ::unlink(PathOf(victim).c_str());
    Drop(victim);
  }
}

void DiskCache::Drop(const std::string& file) {
  auto it = files_.find(file);
  if (it == files_.end()) return;
  used_ -= it->second.size;
  lru_.erase(it->second.lru);
  files_.erase(it);
}

}  // namespace kvmem::memory::store
