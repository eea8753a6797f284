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
    case FinishReason::kToolCalls:
      return "tool_calls";
  }
  return "unknown";
}

}  // namespace kvmem::serve
