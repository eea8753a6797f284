#include "memory/store/local_backend.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "memory/store/atomic_file.h"
#include "memory/store/hash.h"

namespace kvmem::memory::store {
namespace {

// Reads a file through ReadOnlyFile (symlinks refused, a file that shrinks is Corrupt).
class FileBlob final : public Blob {
 public:
  explicit FileBlob(ReadOnlyFile file) : file_(std::move(file)) {}
  uint64_t size() const override { return file_.size(); }
  const std::string& where() const override { return file_.path(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> dst) const override {
    return file_.ReadAt(offset, dst);
  }

 private:
  ReadOnlyFile file_;
};

std::string Errno() { return std::strerror(errno); }

}  // namespace

Result<std::unique_ptr<LocalBackend>> LocalBackend::Open(const std::string& model_dir,
                                                         FileOps* fs) {
  if (fs == nullptr) return InvalidArgument("store file_ops is null");
  KVMEM_RETURN_IF_ERROR(MakeDir(model_dir, *fs));
  const std::string lock = model_dir + "/.lock";
  const int fd = fs->Open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("open '" + lock + "': " + Errno());
  std::unique_ptr<LocalBackend> b(new LocalBackend(model_dir, fs, fd));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Unavailable("agent store '" + model_dir + "' is in use by another process");
    }
    return IoError("lock '" + lock + "': " + Errno());
  }
  KVMEM_RETURN_IF_ERROR(RemoveLeftoverTemps(model_dir, *fs).status());
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(model_dir, *fs));
  for (const std::string& n : names) {
    struct stat st {};
    const std::string dir = model_dir + "/" + n;
    if (n.starts_with('.') || ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    KVMEM_RETURN_IF_ERROR(RemoveLeftoverTemps(dir, *fs).status());
  }
  return b;
}

LocalBackend::~LocalBackend() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string LocalBackend::Dir(const Space& space) const {
  return space.name.empty() ? model_dir_ : model_dir_ + "/" + space.name;
}

std::string LocalBackend::Where(const Space& space, std::string_view name) const {
  return Dir(space) + "/" + std::string(name);
}

Status LocalBackend::Put(const Space& space, std::string_view name, Pieces pieces,
                         std::string_view) {
  const std::string dir = Dir(space);
  KVMEM_RETURN_IF_ERROR(MakeDir(dir, *fs_));
  return WriteFileAtomic(dir, name, pieces, *fs_);
}

Result<int64_t> LocalBackend::Publish(const Space& space, std::string_view name,
                                      std::span<const uint8_t> bytes, std::string_view fence) {
  const std::span<const uint8_t> pieces[] = {bytes};
  KVMEM_RETURN_IF_ERROR(Put(space, name, pieces, fence));
  return int64_t{0};
}

Result<bool> LocalBackend::PutIfAbsent(const Space& space, std::string_view name,
                                       std::span<const uint8_t> bytes) {
  // The lock makes this process the only writer: no one can create it in between.
  Result<uint64_t> size = Size(space, name);
  if (size.ok()) return false;
  if (size.status().code() != ErrorCode::kNotFound) return size.status();
  const std::span<const uint8_t> pieces[] = {bytes};
  KVMEM_RETURN_IF_ERROR(Put(space, name, pieces, {}));
  return true;
}

Result<std::unique_ptr<Blob>> LocalBackend::Open(const Space& space, std::string_view name) const {
  KVMEM_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(Dir(space), name, *fs_));
  return std::unique_ptr<Blob>(new FileBlob(std::move(file)));
}

Result<uint64_t> LocalBackend::Size(const Space& space, std::string_view name) const {
  KVMEM_RETURN_IF_ERROR(CheckFileName(name));
  const std::string path = Where(space, name);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return NotFound("'" + path + "' does not exist");
    return IoError("stat '" + path + "': " + Errno());
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument("'" + path + "' is not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

Status LocalBackend::Remove(const Space& space, std::string_view name, std::string_view) {
  KVMEM_RETURN_IF_ERROR(CheckFileName(name));
  const std::string path = Where(space, name);
  if (fs_->Unlink(path.c_str()) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return NotFound("'" + path + "' does not exist");
    return IoError("delete '" + path + "': " + Errno());
  }
  return SyncDir(Dir(space), *fs_);
}

Result<std::vector<std::string>> LocalBackend::List(const Space& space) const {
  return ListDir(Dir(space), *fs_);
}

Result<std::vector<Space>> LocalBackend::Spaces() const {
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(model_dir_, *fs_));
  std::vector<Space> out;
  for (std::string& n : names) {
    if (IsXxh128Hex(n)) {
      out.push_back({"", std::move(n)});
    }
  }
  return out;
}

Status LocalBackend::RemoveSpace(const Space& space, std::string_view) {
  if (space.name.empty()) return InvalidArgument("the root space cannot be removed");
  const std::string dir = Dir(space);
  Result<std::vector<std::string>> names = ListDir(dir, *fs_);
  if (!names.ok()) {
    return names.status().code() == ErrorCode::kNotFound ? Status::Ok() : names.status();
  }
  for (const std::string& n : *names) {
    const std::string p = dir + "/" + n;
    if (fs_->Unlink(p.c_str()) != 0 && errno != ENOENT) {
      return IoError("delete '" + p + "': " + Errno());
    }
  }
  if (fs_->Rmdir(dir.c_str()) != 0) return IoError("remove '" + dir + "': " + Errno());
  return SyncDir(model_dir_, *fs_);
}

Status LocalBackend::RenameSpace(const Space& from, const Space& to) {
  const std::string a = Dir(from), b = Dir(to);
  if (fs_->Rename(a.c_str(), b.c_str()) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) {
      return FailedPrecondition("'" + b + "' exists; '" + a + "' left alone");
    }
    return IoError("rename '" + a + "' to '" + b + "': " + Errno());
  }
  return SyncDir(model_dir_, *fs_);
}

}  // namespace kvmem::memory::store
