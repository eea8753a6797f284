#include "memory/store/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "core/utf8.h"

namespace kvmem::memory::store {
namespace {

std::string Errno(int e) { return std::strerror(e); }

std::string Join(const std::string& dir, std::string_view name) {
  std::string p = dir;
  if (!p.empty() && p.back() != '/') p += '/';
  p += name;
  return p;
}

std::string RandomSuffix() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(12, '0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = kHex[(r >> (4 * i)) & 15];
  return s;
}

// Closes fd on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Status WriteAll(int fd, std::span<const uint8_t> bytes, FileOps& ops, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ops.Write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("write '" + path + "': " + Errno(errno));
    }
    if (n == 0) return IoError("write '" + path + "': no progress (0 bytes written)");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Writes and syncs the temp file; the caller removes it on failure.
Status FillTemp(int raw_fd, std::span<const std::span<const uint8_t>> pieces, FileOps& ops,
                const std::string& tmp) {
  Fd fd(raw_fd);
  for (std::span<const uint8_t> p : pieces) KVMEM_RETURN_IF_ERROR(WriteAll(fd.get(), p, ops, tmp));
  if (ops.Fsync(fd.get()) != 0) return IoError("fsync '" + tmp + "': " + Errno(errno));
  if (::close(fd.release()) != 0) return IoError("close '" + tmp + "': " + Errno(errno));
  return Status::Ok();
}

}  // namespace

Status CheckFileName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return InvalidArgument("file name " + Quoted(name) + " is not a plain file name");
  }
  if (name.substr(0, kTempPrefix.size()) == kTempPrefix) {
    return InvalidArgument("file name " + Quoted(name) + " uses the temp-file prefix");
  }
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& dir, std::string_view name,
                       std::span<const std::span<const uint8_t>> pieces, FileOps& ops) {
  KVMEM_RETURN_IF_ERROR(CheckFileName(name));
  const std::string target = Join(dir, name);
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = Join(dir, std::string(kTempPrefix) + std::string(name) + "." + RandomSuffix());
    fd = ops.Open(tmp.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST && errno != EINTR) {
      return IoError("create temp file for '" + target + "': " + Errno(errno));
    }
  }
  if (fd < 0) return IoError("create temp file for '" + target + "': names keep colliding");

  Status st = FillTemp(fd, pieces, ops, tmp);
  if (st.ok() && ops.Rename(tmp.c_str(), target.c_str()) != 0) {
    st = IoError("rename '" + tmp + "' to '" + target + "': " + Errno(errno));
  }
  if (!st.ok()) {
    ops.Unlink(tmp.c_str());
    return st.WithContext("writing '" + target + "' (previous version kept)");
  }
  return SyncDir(dir, ops).WithContext("writing '" + target + "' (renamed but not known durable)");
}

Status WriteFileAtomic(const std::string& dir, std::string_view name,
                       std::span<const uint8_t> bytes, FileOps& ops) {
  const std::span<const uint8_t> pieces[] = {bytes};
  return WriteFileAtomic(dir, name, pieces, ops);
}

Result<int> RemoveLeftoverTemps(const std::string& dir, FileOps& ops) {
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir, ops));
  int removed = 0;
  for (const std::string& n : names) {
    if (n.compare(0, kTempPrefix.size(), kTempPrefix) != 0) continue;
    const std::string p = Join(dir, n);
    if (ops.Unlink(p.c_str()) != 0 && errno != ENOENT) {
      return IoError("remove leftover temp file '" + p + "': " + Errno(errno));
    }
    ++removed;
  }
  if (removed > 0) KVMEM_RETURN_IF_ERROR(SyncDir(dir, ops));
  return removed;
}

Result<ReadOnlyFile> ReadOnlyFile::Open(const std::string& dir, std::string_view name,
                                       FileOps& ops) {
  KVMEM_RETURN_IF_ERROR(CheckFileName(name));
  std::string path = Join(dir, name);
  Fd fd(ops.Open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0));
  if (fd.get() < 0) {
    const int e = errno;
    if (e == ENOENT) return NotFound("'" + path + "' does not exist");
    if (e == ELOOP) return InvalidArgument("'" + path + "' is a symlink; refusing to follow it");
    return IoError("open '" + path + "': " + Errno(e));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return IoError("stat '" + path + "': " + Errno(errno));
  if (!S_ISREG(st.st_mode)) return InvalidArgument("'" + path + "' is not a regular file");
  return ReadOnlyFile(fd.release(), static_cast<uint64_t>(st.st_size), std::move(path), &ops);
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      path_(std::move(other.path_)),
      ops_(other.ops_) {}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status ReadOnlyFile::ReadAt(uint64_t offset, std::span<uint8_t> dst) const {
  size_t done = 0;
  while (done < dst.size()) {
    const ssize_t n = ops_->Pread(fd_, dst.data() + done, dst.size() - done,
                                  static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("read '" + path_ + "': " + Errno(errno));
    }
    if (n == 0) return Corrupt("'" + path_ + "' shrank while being read");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status ReadFileNoFollow(const std::string& dir, std::string_view name, uint64_t max_bytes,
                        std::vector<uint8_t>* out, FileOps& ops) {
  KVMEM_ASSIGN_OR_RETURN(const ReadOnlyFile file, ReadOnlyFile::Open(dir, name, ops));
  if (file.size() > max_bytes) {
    return Corrupt("'" + file.path() + "' is " + std::to_string(file.size()) +
                   " bytes, more than the " + std::to_string(max_bytes) + " expected");
  }
  out->resize(file.size());
  return file.ReadAt(0, *out);
}

Status SyncDir(const std::string& dir, FileOps& ops) {
  Fd fd(ops.Open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0));
  if (fd.get() < 0) return IoError("open directory '" + dir + "': " + Errno(errno));
  if (ops.Fsync(fd.get()) != 0) return IoError("fsync directory '" + dir + "': " + Errno(errno));
  return Status::Ok();
}

Status MakeDir(const std::string& dir, FileOps& ops) {
  if (ops.Mkdir(dir.c_str(), 0700) == 0) return Status::Ok();
  if (errno != EEXIST) return IoError("create directory '" + dir + "': " + Errno(errno));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return IoError("stat '" + dir + "': " + Errno(errno));
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument("'" + dir + "' exists and is not a directory (symlinks are refused)");
  }
  return Status::Ok();
}

Result<std::vector<std::string>> ListDir(const std::string& dir, FileOps& ops) {
  DIR* d = ops.OpenDir(dir.c_str());
  if (d == nullptr) {
    const int e = errno;
    if (e == ENOENT) return NotFound("directory '" + dir + "' does not exist");
    return IoError("open directory '" + dir + "': " + Errno(e));
  }
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* ent = ops.ReadDir(d)) {
    const std::string_view n = ent->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  const int e = errno;
  ::closedir(d);
  if (e != 0) return IoError("read directory '" + dir + "': " + Errno(e));
  return names;
}

}  // namespace kvmem::memory::store
