#include "memory/store/fingerprint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "memory/store/hash.h"

namespace kvmem::memory::store {

Result<std::string> ModelFingerprint(const std::string& gguf_path) {
  const int fd = ::open(gguf_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("open model '" + gguf_path + "': " + std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr size_t kChunk = 4 << 20;
  std::vector<uint8_t> buf(kChunk);
  Xxh128Stream h;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      return IoError("read model '" + gguf_path + "': " + std::strerror(e));
    }
    if (n == 0) break;
    h.Update({buf.data(), static_cast<size_t>(n)});
  }
  ::close(fd);
  return h.HexDigest();
}

}  // namespace kvmem::memory::store
