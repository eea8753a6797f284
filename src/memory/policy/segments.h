// Memories made of named segments that a client writes (KEEP's object states and task records,
// memory/segments/): the request AgentRuntime passes to MemoryPolicy::Segments, and the rules for
// segment names and texts, checked the same way by every entry (the HTTP API, the CLI, the
// policy itself). Names and texts are untrusted.
// Thread-safety: values and pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvmem::memory {

inline constexpr size_t kMaxSegmentNameBytes = 128;
inline constexpr size_t kMaxSegmentTextBytes = size_t{64} << 10;

struct SegmentRequest {
  enum class Op { kList, kPut, kDelete };
  Op op = Op::kList;
  std::string name;  // kPut, kDelete
  std::string text;  // kPut
  bool writes() const { return op != Op::kList; }
};

// InvalidArgument saying what is wrong: a name is 1..128 bytes of valid UTF-8 without '/' or
// control characters (C0, DEL, C1); a text is valid UTF-8 of at most 64 KiB.
Status ValidateSegmentName(std::string_view name);
Status ValidateSegmentText(std::string_view text);
// The request's name (kPut, kDelete) and text (kPut).
Status ValidateSegmentRequest(const SegmentRequest& request);

}  // namespace kvmem::memory
