// Wall-clock seconds for the timings runs report. Thread-safety: pure functions.
#pragma once

#include <chrono>

namespace kvmem {

using SteadyClock = std::chrono::steady_clock;

// Seconds from t0 to now.
inline double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace kvmem
