// Crash-safe file replacement and symlink-refusing reads for the agent store. A write goes to a
// fresh temp file in the target's directory (O_CREAT|O_EXCL|O_NOFOLLOW, so it never follows or
// reuses a planted name), is written fully, fsync'd and closed, renamed over the target, and the
// directory is fsync'd so the rename itself is durable. Readers therefore see the old file or the
// new one, never a mix.
//
// Failure handling: any failed step returns an error and removes the temp file; the previous
// version stays intact. A failed fsync is never retried: after a failed fsync Linux may have
// dropped the dirty pages and cleared the error, so a second fsync could report success for
// data that is not on disk (the 2018 "fsyncgate" lesson). If only the final directory fsync
// fails the new file is already in place but may not survive a crash; the error tells the caller
// not to treat the write as acknowledged.
//
// Opens, reads, writes, fsyncs, renames, unlinks, mkdirs and listings go through `ops`
// (file_ops.h), the real calls unless a test injects others; close, fstat and lstat do not.
// Files are created 0600 and directories 0700: an agent's cache is its private conversation.
// Thread-safe: functions over the file system; callers serialize writes to one path.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "memory/store/file_ops.h"

namespace kvmem::memory::store {

// Temp files are named kTempPrefix + target name + "." + random suffix, so they are recognizable
// (RemoveLeftoverTemps) and hidden from listings of block and manifest files.
inline constexpr std::string_view kTempPrefix = ".kvmem-tmp.";

// A plain file name: non-empty, no '/', no NUL, not "." or "..", not a temp name.
Status CheckFileName(std::string_view name);

// Replaces dir/name with the concatenation of `pieces`, atomically and durably (see above).
Status WriteFileAtomic(const std::string& dir, std::string_view name,
                       std::span<const std::span<const uint8_t>> pieces,
                       FileOps& ops = RealFileOps());
Status WriteFileAtomic(const std::string& dir, std::string_view name,
                       std::span<const uint8_t> bytes, FileOps& ops = RealFileOps());

// Removes the temp files a crashed writer left in dir; returns how many. Only safe while no
// other writer is using dir (the agent store holds its lock).
Result<int> RemoveLeftoverTemps(const std::string& dir, FileOps& ops = RealFileOps());

// A regular file open for reading at offsets: Open refuses symlinks (O_NOFOLLOW) and
// non-regular files, NotFound if it does not exist. Reading (not mapping) keeps a file truncated
// under us from faulting (SIGBUS) the process. Thread-compatible.
class ReadOnlyFile {
 public:
  static Result<ReadOnlyFile> Open(const std::string& dir, std::string_view name,
                                   FileOps& ops = RealFileOps());
  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&&) = delete;
  ~ReadOnlyFile();

  uint64_t size() const { return size_; }  // when opened
  const std::string& path() const { return path_; }
  // Exactly dst.size() bytes at `offset`: Corrupt when the file ends first (it shrank), IoError
  // when a read fails.
  Status ReadAt(uint64_t offset, std::span<uint8_t> dst) const;

 private:
  ReadOnlyFile(int fd, uint64_t size, std::string path, FileOps* ops)
      : fd_(fd), size_(size), path_(std::move(path)), ops_(ops) {}
  int fd_;
  uint64_t size_;
  std::string path_;
  FileOps* ops_;
};

// Reads dir/name whole into *out (resized) as ReadOnlyFile does, refusing files larger than
// max_bytes.
Status ReadFileNoFollow(const std::string& dir, std::string_view name, uint64_t max_bytes,
                        std::vector<uint8_t>* out, FileOps& ops = RealFileOps());

// fsync of a directory, making renames and unlinks in it durable.
Status SyncDir(const std::string& dir, FileOps& ops = RealFileOps());

// Creates dir (mode 0700) if missing; an existing symlink or non-directory there is an error.
Status MakeDir(const std::string& dir, FileOps& ops = RealFileOps());

// Names of the entries of dir except "." and "..", unsorted.
Result<std::vector<std::string>> ListDir(const std::string& dir, FileOps& ops = RealFileOps());

}  // namespace kvmem::memory::store
