#include "serve/api_types.h"

namespace kvmem::serve {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEndOfTurn:
      return "end_turn";
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

const char* CacheTierName(CacheTier tier) {
  switch (tier) {
    case CacheTier::kMiss:
      return "miss";
    case CacheTier::kHot:
      return "hot";
    case CacheTier::kWarm:
      return "warm";
    case CacheTier::kCold:
      return "cold";
  }
  return "unknown";
}

}  // namespace kvmem::serve
