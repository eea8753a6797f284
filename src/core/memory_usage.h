// This process's resident memory as the kernel reports it (/proc/self/status), for the memory
// figures `kvmem run` and the benchmarks print next to the budget computed from the geometry.
// Thread-safe.
#pragma once

#include <cstddef>
#include <string>

namespace kvmem {

struct ProcessMemory {
  size_t rss = 0;       // resident now (VmRSS), bytes
  size_t peak_rss = 0;  // the most resident so far (VmHWM), bytes
};

// Zeros where /proc is unavailable.
ProcessMemory ReadProcessMemory();

// Resident bytes of this process's mappings of `path` (/proc/self/smaps); 0 if none.
size_t MappedFileRss(const std::string& path);

}  // namespace kvmem
