// A FileOps for tests that counts the store's file-system calls and fails one of them (SQLite's
// test VFS): the Nth call, of any kind or of one kind, fails with a chosen errno; writes can
// also be cut short (at most half the bytes asked for, the caller must loop). fsync can be made
// a no-op: these tests stop the process, they do not cut the power, and real fsyncs made a loop
// over a few hundred fault points take most of a minute. Header-only.
// Arm it (FailNth) from one thread; the calls it counts may come from several (a load reads
// blocks on several threads), so the count is atomic.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "memory/store/file_ops.h"

namespace kvmem::memory::store::testing {

enum class FsCall {
  kAny,
  kOpen,
  kRead,
  kWrite,
  kFsync,
  kRename,
  kUnlink,
  kMkdir,
  kRmdir,
  kOpenDir,
  kReadDir
};

class FaultyFs : public FileOps {
 public:
  // From now on, counts calls of `kind` (kAny: every call) and fails the nth (1-based) with
  // `error`; n = 0 fails none. Resets the count and fired().
  void FailNth(int64_t n, FsCall kind = FsCall::kAny, int error = EIO) {
    fail_at_ = n;
    kind_ = kind;
    error_ = error;
    count_ = 0;
    fired_ = false;
  }
  void set_short_writes(bool on) { short_writes_ = on; }
  void set_real_fsync(bool on) { real_fsync_ = on; }
  bool fired() const { return fired_; }
  int64_t count() const { return count_; }  // calls of the armed kind since FailNth

  int Open(const char* path, int flags, mode_t mode) override {
    return Fail(FsCall::kOpen) ? -1 : FileOps::Open(path, flags, mode);
  }
  ssize_t Pread(int fd, void* buf, size_t n, off_t offset) override {
    return Fail(FsCall::kRead) ? -1 : FileOps::Pread(fd, buf, n, offset);
  }
  ssize_t Write(int fd, const void* buf, size_t n) override {
    if (Fail(FsCall::kWrite)) return -1;
    return FileOps::Write(fd, buf, short_writes_ && n > 1 ? n / 2 : n);
  }
  int Fsync(int fd) override {
    if (Fail(FsCall::kFsync)) return -1;
    return real_fsync_ ? FileOps::Fsync(fd) : 0;
  }
  int Rename(const char* from, const char* to) override {
    return Fail(FsCall::kRename) ? -1 : FileOps::Rename(from, to);
  }
  int Unlink(const char* path) override {
    return Fail(FsCall::kUnlink) ? -1 : FileOps::Unlink(path);
  }
  int Mkdir(const char* path, mode_t mode) override {
    return Fail(FsCall::kMkdir) ? -1 : FileOps::Mkdir(path, mode);
  }
  int Rmdir(const char* path) override { return Fail(FsCall::kRmdir) ? -1 : FileOps::Rmdir(path); }
  DIR* OpenDir(const char* path) override {
    return Fail(FsCall::kOpenDir) ? nullptr : FileOps::OpenDir(path);
  }
  dirent* ReadDir(DIR* dir) override {
    return Fail(FsCall::kReadDir) ? nullptr : FileOps::ReadDir(dir);
  }

 private:
  // True (errno set) when this call is the one to fail.
  bool Fail(FsCall call) {
    if (kind_ != FsCall::kAny && kind_ != call) return false;
    if (++count_ != fail_at_) return false;
    fired_ = true;
    errno = error_;
    return true;
  }

  int64_t fail_at_ = 0;
  FsCall kind_ = FsCall::kAny;
  int error_ = EIO;
  std::atomic<int64_t> count_ = 0;
  std::atomic<bool> fired_ = false;
  bool short_writes_ = false;
  bool real_fsync_ = true;
};

}  // namespace kvmem::memory::store::testing
