// Where an agent's memory came from for a turn (semantic.md's tiers), as the runtime reports it
// and the API and metrics show it. Thread-safety: values and pure functions.
#pragma once

namespace kvmem::memory {

enum class Tier {
  kMiss,  // nothing reused: the prompt was prefilled from scratch
  kHot,   // the agent's memory was resident in RAM
  kWarm,  // loaded from the local store (disk)
  kCold,  // loaded from a remote store (none yet)
};

const char* TierName(Tier t);  // "miss", "hot", "warm", "cold"

}  // namespace kvmem::memory
