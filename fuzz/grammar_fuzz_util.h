// What gbnf_fuzz and json_schema_fuzz share: splitting an input into a grammar (or schema) and
// the text to match against it, and the checks of a Matcher over that text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/grammar/matcher.h"

namespace kvmem::fuzz {

inline void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// "<grammar>\0<text>": the text is empty when there is no NUL.
inline std::pair<std::string_view, std::string_view> SplitAtNul(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  if (nul == std::string_view::npos) return {all, {}};
  return {all.substr(0, nul), all.substr(nul + 1)};
}

// A small vocabulary: single bytes of every class a grammar tells apart, pieces of JSON, a
// UTF-8 character and its two halves, and one end-of-generation token (id 0).
inline const engine::grammar::TokenTable& FuzzTokenTable() {
  static const engine::grammar::TokenTable table = [] {
    std::vector<std::string> pieces = {"<eog>"};
    for (const char* p : {"a",
                          "z",
                          "A",
                          "0",
                          "9",
                          "-",
                          ".",
                          "e",
                          "+",
                          " ",
                          "\n",
                          "\t",
                          "\"",
                          "\\",
                          "{",
                          "}",
                          "[",
                          "]",
                          ":",
                          ",",
                          "/",
                          "u",
                          "x",
                          "true",
                          "false",
                          "null",
                          "{\"",
                          "\":",
                          "\",\"",
                          "\"}",
                          "ab",
                          "12",
                          "  ",
                          "\xc3\xa9",
                          "\xc3",
                          "\xa9",
                          "\xe2\x82\xac",
                          "\xf0\x9f\x98\x80",
                          "\x01",
                          "\x7f"}) {
      pieces.emplace_back(p);
    }
    return engine::grammar::TokenTable(std::move(pieces), {0});
  }();
  return table;
}

// The mask is exact (matcher.h): bit i is set iff AcceptToken(i) succeeds from this state.
inline void CheckMask(engine::grammar::Matcher& m) {
  const engine::grammar::TokenTable& table = FuzzTokenTable();
  engine::grammar::TokenMask mask;
  m.FillMask(table, &mask);
  Check(mask.size() == table.vocab_size());
  for (int32_t id = 0; id < table.vocab_size(); ++id) {
    engine::grammar::Matcher copy = m;
    Check(copy.AcceptToken(table, id) == mask.Test(id));
  }
}

// Feeds `text` to a fresh matcher byte by byte until a byte is refused, checking the mask at
// the start and where the walk stops, and that AcceptBytes of the consumed prefix at once
// agrees with the walk (all or nothing). Returns how many bytes were accepted; *complete says
// whether that prefix is a complete sentence.
inline size_t WalkText(const std::shared_ptr<const engine::grammar::Grammar>& g,
                       std::string_view text, bool* complete) {
  engine::grammar::Matcher m(g);
  CheckMask(m);
  size_t n = 0;
  while (n < text.size() && m.AcceptBytes(text.substr(n, 1))) ++n;
  CheckMask(m);
  *complete = m.IsComplete();
  engine::grammar::Matcher whole(g);
  Check(whole.AcceptBytes(text.substr(0, n)));
  Check(whole.IsComplete() == *complete);
  if (n < text.size()) {
    Check(!engine::grammar::Matcher(g).AcceptBytes(text.substr(0, n + 1)));
  }
  return n;
}

}  // namespace kvmem::fuzz
