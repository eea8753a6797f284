#include "memory/intent/turn_spans.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/hash.h"
#include "tokenizer/chat_template.h"

namespace kvmem::memory {
namespace {

// The role a message opened at tokens[at] names: the text of the next few pieces, leading
// whitespace and header punctuation skipped ("<|im_start|>system\n", "<start_of_turn>user\n",
// "<|start_header_id|>system<|end_header_id|>").
std::string RoleAfter(std::span<const int32_t> tokens,
                      const std::function<std::string_view(int32_t)>& piece, size_t at) {
  std::string s;
  for (size_t i = at + 1; i < tokens.size() && i <= at + 3; ++i) s += piece(tokens[i]);
  const size_t b = s.find_first_not_of(" \n");
  return b == std::string::npos ? std::string() : s.substr(b, 10);
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

TurnSpans FindTurnSpans(std::span<const int32_t> tokens,
                        const std::function<std::string_view(int32_t)>& piece, int64_t new_from) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> open;
  for (int64_t i = 0; i < n; ++i) {
    if (tokenizer::OpensChatMessage(piece(tokens[i]))) open.push_back(i);
  }
  TurnSpans s;
  s.action_begin = std::clamp<int64_t>(new_from, 0, n);
  if (open.empty()) return s;
  s.protect_end = open[0];
  if (StartsWith(RoleAfter(tokens, piece, open[0]), "system")) {
    s.protect_end = open.size() > 1 ? open[1] : n;
  }
  for (size_t k = 0; k < open.size(); ++k) {
    if (StartsWith(RoleAfter(tokens, piece, open[k]), "user")) {
      s.session_begin = open[k];
      s.session_end = k + 1 < open.size() ? open[k + 1] : n;
      break;
    }
  }
  // The last opener within a few tokens of the end is the generation prompt ("<|im_start|>
  // assistant\n"); the message before it is the actionable one.
  size_t last = open.size() - 1;
  if (open[last] >= n - 6 && last > 0) --last;
  s.action_begin = std::max(open[last], s.protect_end);
  return s;
}

uint64_t SessionKey(std::span<const int32_t> tokens, const TurnSpans& spans) {
  std::span<const int32_t> key = tokens.first(std::min<size_t>(tokens.size(), 256));
  const int64_t end = std::min<int64_t>(spans.session_end, static_cast<int64_t>(tokens.size()));
  if (end > spans.session_begin && spans.session_begin >= 0) {
    key = tokens.subspan(spans.session_begin, end - spans.session_begin);
  }
  return Fnv1a64(key.data(), key.size_bytes());
}

}  // namespace kvmem::memory
