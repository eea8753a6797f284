#include "core/memory_usage.h"

#include <cstdio>
#include <cstring>

namespace kvmem {

ProcessMemory ReadProcessMemory() {
  ProcessMemory m;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long kib = 0;  // NOLINT(runtime/int): sscanf's %lu
    if (std::sscanf(line, "VmRSS: %lu kB", &kib) == 1) m.rss = static_cast<size_t>(kib) * 1024;
    if (std::sscanf(line, "VmHWM: %lu kB", &kib) == 1) {
      m.peak_rss = static_cast<size_t>(kib) * 1024;
    }
  }
  std::fclose(f);
  return m;
}

}  // namespace kvmem
