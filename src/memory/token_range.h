// Tokens [begin, end) of a turn's query or prefill. Thread-safety: a plain value.
#pragma once

#include <cstdint>

namespace kvmem::memory {

struct TokenRange {
  int64_t begin = 0;
  int64_t end = -1;  // < 0: to the end
};

}  // namespace kvmem::memory
