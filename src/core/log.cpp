#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace kvmem {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void LogPrintf(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < g_level.load()) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "kvmem %s: %s\n", kNames[static_cast<int>(level)], buf);
}

}  // namespace kvmem
