#include "memory/store/file_ops.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

namespace kvmem::memory::store {

int FileOps::Open(const char* path, int flags, mode_t mode) { return ::open(path, flags, mode); }
ssize_t FileOps::Pread(int fd, void* buf, size_t n, off_t offset) {
  return ::pread(fd, buf, n, offset);
}
ssize_t FileOps::Write(int fd, const void* buf, size_t n) { return ::write(fd, buf, n); }
int FileOps::Fsync(int fd) { return ::fsync(fd); }
int FileOps::Rename(const char* from, const char* to) { return ::rename(from, to); }
int FileOps::Unlink(const char* path) { return ::unlink(path); }
int FileOps::Mkdir(const char* path, mode_t mode) { return ::mkdir(path, mode); }
int FileOps::Rmdir(const char* path) { return ::rmdir(path); }
DIR* FileOps::OpenDir(const char* path) { return ::opendir(path); }
dirent* FileOps::ReadDir(DIR* dir) { return ::readdir(dir); }

FileOps& RealFileOps() {
  static FileOps real;
  return real;
}

}  // namespace kvmem::memory::store
