// Minimal leveled logging to stderr. Thread-safe (one fprintf per message).
#pragma once

#include <cstdio>

namespace kvmem {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogPrintf(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace kvmem

#define KVMEM_LOG_DEBUG(...) ::kvmem::LogPrintf(::kvmem::LogLevel::kDebug, __VA_ARGS__)
#define KVMEM_LOG_INFO(...) ::kvmem::LogPrintf(::kvmem::LogLevel::kInfo, __VA_ARGS__)
#define KVMEM_LOG_WARN(...) ::kvmem::LogPrintf(::kvmem::LogLevel::kWarn, __VA_ARGS__)
#define KVMEM_LOG_ERROR(...) ::kvmem::LogPrintf(::kvmem::LogLevel::kError, __VA_ARGS__)
