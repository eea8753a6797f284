#include "tokenizer/spm.h"

#include <queue>
#include <unordered_map>
#include <utility>

#include "tokenizer/unicode.h"

namespace kvmem::tokenizer {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool Mergeable(TokenType type) {
  return type == TokenType::kNormal || type == TokenType::kUserDefined ||
         type == TokenType::kUnused || type == TokenType::kUndefined;
}

}  // namespace

int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  const int hi = HexDigit(text[3]);
  const int lo = HexDigit(text[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

Result<SpmModel> SpmModel::Create(const Vocab& vocab, int32_t unk_id) {
  SpmModel m;
  m.unk_id_ = unk_id;
  m.byte_to_id_.fill(-1);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.Type(id) != TokenType::kByte) continue;
    const int b = ParseByteToken(vocab.Text(id));
    if (b < 0) return Corrupt("byte token " + std::to_string(id) + " '" + vocab.Text(id) + "'");
    m.byte_to_id_[b] = id;
  }
  return m;
}

void SpmModel::Encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  struct Symbol {
    std::string_view piece;  // empty once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = DecodeUtf8(text, pos).len;
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({text.substr(pos, len), n - 1, n + 1});
    pos += len;
  }
  symbols.back().next = -1;

  struct Candidate {
    float score;
    int32_t left;
    int32_t right;
    size_t size;  // bytes of the merged piece when queued; a stale candidate differs
    bool operator<(const Candidate& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Candidate> queue;
  // Pieces of unused tokens -> the two pieces they were formed from, to undo those merges.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;
  auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::string_view a = symbols[left].piece;
    const std::string_view b = symbols[right].piece;
    const std::string_view merged(a.data(), a.size() + b.size());  // adjacent in `text`
    const int32_t id = vocab.Find(merged);
    if (id < 0 || !Mergeable(vocab.Type(id))) return;
    queue.push({vocab.Score(id), left, right, merged.size()});
    if (vocab.Type(id) == TokenType::kUnused) rev_merge[merged] = {a, b};
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) push(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.piece.empty() || right.piece.empty() ||
        left.piece.size() + right.piece.size() != c.size) {
      continue;
    }
    left.piece = std::string_view(left.piece.data(), c.size);
    right.piece = {};
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    push(left.prev, c.left);
    push(c.left, left.next);
  }

  auto emit = [&](auto&& self, std::string_view piece) -> void {
    const int32_t id = vocab.Find(piece);
    if (id >= 0 && vocab.Type(id) == TokenType::kUnused) {
      auto it = rev_merge.find(piece);
      if (it != rev_merge.end()) {
        self(self, it->second.first);
        self(self, it->second.second);
        return;
      }
    }
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    bool have_bytes = true;
    for (char b : piece) have_bytes = have_bytes && byte_to_id_[static_cast<uint8_t>(b)] >= 0;
    if (have_bytes) {
      for (char b : piece) out->push_back(byte_to_id_[static_cast<uint8_t>(b)]);
    } else if (unk_id_ >= 0) {
      out->push_back(unk_id_);  // no byte fallback: the whole character becomes one unk
    }
  };
  for (int32_t i = 0; i >= 0; i = symbols[i].next) emit(emit, symbols[i].piece);
}

}  // namespace kvmem::tokenizer
