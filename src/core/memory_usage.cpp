#include "core/memory_usage.h"

#include <cctype>
#include <cstdio>
#include <string_view>
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

namespace {

// A mapping header of smaps ("start-end perms offset dev inode   path"), as opposed to a field
// line ("Rss:   12 kB"): its first word is two hex numbers joined by '-'.
bool IsMappingHeader(const char* line) {
  const char* sp = std::strchr(line, ' ');
  if (sp == nullptr || sp == line) return false;
  bool dash = false;
  for (const char* c = line; c < sp; ++c) {
    if (*c == '-') {
      dash = true;
    } else if (!std::isxdigit(static_cast<unsigned char>(*c))) {
      return false;
    }
  }
  return dash;
}

}  // namespace

size_t MappedFileRss(const std::string& path) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return 0;
  char line[4096];
  bool in_file = false;
  size_t total = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (IsMappingHeader(line)) {
      std::string_view l(line);
      while (!l.empty() && (l.back() == '\n' || l.back() == ' ')) l.remove_suffix(1);
      in_file = !path.empty() && l.ends_with(path);
      continue;
    }
    unsigned long kib = 0;  // NOLINT(runtime/int): sscanf's %lu
    if (in_file && std::sscanf(line, "Rss: %lu kB", &kib) == 1) {
      total += static_cast<size_t>(kib) * 1024;
    }
  }
  std::fclose(f);
  return total;
}

}  // namespace kvmem
