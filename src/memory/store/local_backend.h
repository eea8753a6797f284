// The agent store's default backend: a directory on local disk, one process at a time.
//
//   <model dir>/                 the root space (the name secret); .lock, held (flock) by the
//                                process that opened it
//   <model dir>/<space name>/    one directory per space; its objects are files
//
// Writes are atomic_file.h's (temp file, fsync, rename, directory fsync); reads refuse
// symlinks. The backend is not shared: leases are granted at once with an empty fence, versions
// stay 0 (the process holding the lock is the only writer). Every system call goes through the
// FileOps it is given (file_ops.h), so tests can make any of them fail.
// Thread-safety: as StoreBackend; callers serialize writes to one object (the store's
// per-agent mutex).
#pragma once

#include <memory>
#include <string>

#include "memory/store/file_ops.h"
#include "memory/store/store_backend.h"

namespace kvmem::memory::store {

class LocalBackend final : public StoreBackend {
 public:
  // Creates model_dir if missing, takes its lock (Unavailable while another process holds it)
  // and removes temp files a crash left in it and in its space directories. `fs` outlives the
  // backend.
  static Result<std::unique_ptr<LocalBackend>> Open(const std::string& model_dir, FileOps* fs);
  ~LocalBackend() override;

  bool shared() const override { return false; }
  std::string Describe() const override { return "directory " + model_dir_; }
  std::string Where(const Space& space, std::string_view name) const override;

  Status Put(const Space& space, std::string_view name, Pieces pieces,
             std::string_view fence) override;
  Result<int64_t> Publish(const Space& space, std::string_view name, std::span<const uint8_t> bytes,
                          std::string_view fence) override;
  Result<bool> PutIfAbsent(const Space& space, std::string_view name,
                           std::span<const uint8_t> bytes) override;
  Result<std::unique_ptr<Blob>> Open(const Space& space, std::string_view name) const override;
  Result<uint64_t> Size(const Space& space, std::string_view name) const override;
  Status Remove(const Space& space, std::string_view name, std::string_view fence) override;
  Result<std::vector<std::string>> List(const Space& space) const override;
  Result<std::vector<Space>> Spaces() const override;
  Status RemoveSpace(const Space& space, std::string_view fence) override;
  Result<int64_t> Version(const Space&) const override { return 0; }
  Result<std::string> AcquireLease(const Space&, std::chrono::milliseconds) override {
    return std::string();
  }
  void ReleaseLease(const Space&, std::string_view) override {}

  // Moves a space's directory to another name (stores written before directory names were
  // keyed: agent_store.h). FailedPrecondition when `to` exists.
  Status RenameSpace(const Space& from, const Space& to);

 private:
  LocalBackend(std::string model_dir, FileOps* fs, int lock_fd)
      : model_dir_(std::move(model_dir)), fs_(fs), lock_fd_(lock_fd) {}
  std::string Dir(const Space& space) const;

  std::string model_dir_;
  FileOps* fs_;
  int lock_fd_;
};

}  // namespace kvmem::memory::store
