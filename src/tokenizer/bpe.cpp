#include "tokenizer/bpe.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace kvmem::tokenizer {
namespace {

std::string ByteLevelText(std::string_view bytes) {
  std::string s;
  s.reserve(bytes.size() * 2);
  for (char b : bytes) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &s);
  return s;
}

}  // namespace

Result<BpeModel> BpeModel::Create(const Vocab& vocab, std::span<const std::string> merges,
                                  bool ignore_merges, int32_t unk_id) {
  BpeModel m;
  m.ignore_merges_ = ignore_merges;
  for (int b = 0; b < 256; ++b) {
    std::string text;
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &text);
    const int32_t id = vocab.Find(text);
    m.byte_to_id_[b] = id >= 0 ? id : unk_id;
  }
  m.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& line = merges[rank];
    // Byte-level token texts never contain ' ' (it is mapped to U+0120), so the first space
    // separates the pair.
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size()) {
      return Corrupt("merge " + std::to_string(rank) + " '" + line + "' is not 'left right'");
    }
    const std::string_view left(line.data(), space);
    const std::string_view right(line.data() + space + 1, line.size() - space - 1);
    const int32_t left_id = vocab.Find(left);
    const int32_t right_id = vocab.Find(right);
    const int32_t result_id = vocab.Find(std::string(left) + std::string(right));
    if (left_id < 0 || right_id < 0 || result_id < 0) {
      return Corrupt("merge " + std::to_string(rank) + " '" + line +
                     "' names a token missing from the vocabulary");
    }
    // A repeated pair keeps its first (best) rank.
    m.merges_.try_emplace(Key(left_id, right_id), Merge{static_cast<int32_t>(rank), result_id});
  }
  return m;
}

void BpeModel::EncodeWord(const Vocab& vocab, std::string_view word,
                          std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = vocab.Find(ByteLevelText(word));
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  // Doubly linked list of symbols; merged-away symbols get id -1.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    const int32_t id = byte_to_id_[static_cast<uint8_t>(c)];
    if (id < 0) continue;  // no token for this byte and no unk: drop it
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t pos;   // left symbol
    int32_t left;  // ids when queued; a stale candidate no longer matches
    int32_t right;
    int32_t result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(Key(symbols[pos].id, symbols[next].id));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, pos, symbols[pos].id, symbols[next].id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.pos];
    if (left.id != c.left || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right) continue;
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    right.id = -1;
    push(left.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

std::string BpeModel::DecodeByteLevel(std::string_view token_text) {
  std::string bytes;
  bytes.reserve(token_text.size());
  for (size_t pos = 0; pos < token_text.size();) {
    const Utf8Char c = DecodeUtf8(token_text, pos);
    const int b = c.valid ? UnicodeToByte(c.cp) : -1;
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
    } else {
      bytes.append(token_text.substr(pos, c.len));
    }
    pos += c.len;
  }
  return bytes;
}

}  // namespace kvmem::tokenizer
