// Where a rendered agent prompt's parts lie among its tokens, for IntentKV (intentkv.txt §3.1,
// appendix A): the protected system span, the actionable span (the latest user or tool message
// that drives the next step, with the generation prompt after it) and the session span (the
// first user message, whose tokens key the session's QueryMemory). Messages are found by the
// tokens that open them in the supported templates (tokenizer::OpensChatMessage) and the role
// spelled after the opener.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

namespace kvmem::memory {

struct TurnSpans {
  int64_t protect_end = 0;   // [0, protect_end): what precedes the first message, and a system one
  int64_t action_begin = 0;  // [action_begin, n): the latest message and the generation prompt
  int64_t session_begin = 0, session_end = 0;  // the first user message; empty when none
};

// tokens: the whole prompt; piece(id) its text. new_from: where the turn's new tokens start
// (the actionable span when no message opener is found after it).
TurnSpans FindTurnSpans(std::span<const int32_t> tokens,
                        const std::function<std::string_view(int32_t)>& piece, int64_t new_from);

// The session key of appendix A: a hash of the session span's tokens, else of the first 256.
uint64_t SessionKey(std::span<const int32_t> tokens, const TurnSpans& spans);

}  // namespace kvmem::memory
