// The calling thread's CPU time, for single-thread kernel benchmarks: other load on the machine
// slows it less than wall time does.
#pragma once

#include <time.h>

namespace kvmem::bench {

inline double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace kvmem::bench
