// The file-system calls of the agent store, behind one small interface so that tests can make
// any of them fail (SQLite's test VFS is the model): every open, read, write, fsync (of files
// and directories), rename, unlink, mkdir, rmdir and directory listing the store makes goes
// through a FileOps. The base class is the real system calls; a test subclass overrides the
// calls it wants to count or fail (tests/memory/faulty_fs.h). One virtual call per system call:
// nothing next to the system call itself.
//
// Each method has its system call's contract: -1 (or nullptr) with errno set on failure.
// Thread-safe as the system calls are; a subclass states its own.
#pragma once

#include <dirent.h>
#include <sys/types.h>

namespace kvmem::memory::store {

class FileOps {
 public:
  virtual ~FileOps() = default;

  virtual int Open(const char* path, int flags, mode_t mode);
  virtual ssize_t Pread(int fd, void* buf, size_t n, off_t offset);
  virtual ssize_t Write(int fd, const void* buf, size_t n);
  virtual int Fsync(int fd);  // files and directories alike
  virtual int Rename(const char* from, const char* to);
  virtual int Unlink(const char* path);
  virtual int Mkdir(const char* path, mode_t mode);
  virtual int Rmdir(const char* path);
  virtual DIR* OpenDir(const char* path);
  // nullptr at the end (errno unchanged) or on failure (errno set), as readdir(3).
  virtual dirent* ReadDir(DIR* dir);
};

// The real system calls, shared by every caller that injects nothing.
FileOps& RealFileOps();

}  // namespace kvmem::memory::store
