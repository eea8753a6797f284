// The matcher and its token mask: the mask against a brute-force reference (every token tried
// through AcceptToken on a copy), on vocabularies with shared prefixes, duplicates, split UTF-8
// characters and end-of-generation tokens.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/utf8.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_table.h"

namespace kvmem::engine::grammar {
namespace {

std::shared_ptr<const Grammar> Compile(const std::string& gbnf) {
  auto g = Grammar::Parse(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::make_shared<const Grammar>(std::move(*g));
}

// A small vocabulary in the style of byte-level BPE: single bytes (all 256, so any text can be
// spelled), JSON-ish pieces sharing prefixes, a duplicate, pieces that split "é" (C3 A9), "€"
// (E2 82 AC) and "😀" (F0 9F 98 80) across tokens, invalid bytes, and two EOG tokens.
TokenTable TestVocab(int32_t* eog) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"{", "{\"", "{\n", "\"", "\":", "\": ", "\",", "\"}", "}", "},", "[", "]",
                        "[]", "{}", " ", "  ", "\n", "\n  ", ",", ", ", ":", "true", "tr", "false",
                        "null", "nul", "0", "1", "12", "123", "-", "-1", ".", ".5", "e", "E+",
                        "name", "na", "age", "\"name", "\"name\"", "\"age\":", "hello", " world",
                        "\\", "\\\"", "\\n", "\\u", "00e9", "abc", "abc", "x\"", "a\"b",
                        "\xC3\xA9", "\xC3", "\xA9", "\xE2\x82", "\xAC", "\xE2\x82\xAC",
                        "\xF0\x9F", "\x98\x80", "\xF0\x9F\x98\x80", "\xC0\x80", "\xFF",
                        "\xED\xA0\x80", "caf\xC3\xA9", "caf\xC3"}) {
    pieces.push_back(p);
  }
  pieces.push_back("");  // a control token: never allowed
  *eog = static_cast<int32_t>(pieces.size());
  pieces.push_back("<eos>");
  pieces.push_back("<eot>");
  return TokenTable(pieces, {*eog, *eog + 1});
}

// Mask bit == "AcceptToken succeeds on a copy", for every token.
void ExpectMaskExact(Matcher& m, const TokenTable& table, const std::string& where) {
  TokenMask mask;
  m.FillMask(table, &mask);
  ASSERT_EQ(mask.size(), table.vocab_size());
  for (int32_t id = 0; id < table.vocab_size(); ++id) {
    Matcher copy = m;
    const bool accepts = copy.AcceptToken(table, id);
    ASSERT_EQ(mask.Test(id), accepts) << "token " << id << " " << Quoted(table.piece(id))
                                      << " after " << Quoted(where);
  }
}

TEST(TokenTable, TrieCoversEveryAllowedTokenOnce) {
  int32_t eog;
  TokenTable t = TestVocab(&eog);
  std::vector<int> seen(t.vocab_size(), 0);
  const auto nodes = t.nodes();
  std::string path;
  for (size_t i = 0; i < nodes.size(); ++i) {
    path.resize(nodes[i].depth - 1);
    path += static_cast<char>(nodes[i].byte);
    ASSERT_GT(nodes[i].next, static_cast<int32_t>(i));
    for (int32_t k = nodes[i].tokens_begin; k < t.tokens_end(i); ++k) {
      const int32_t id = t.token_ids()[k];
      EXPECT_EQ(t.piece(id), path);
      ++seen[id];
    }
  }
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    EXPECT_EQ(seen[id], t.piece(id).empty() || t.is_eog(id) ? 0 : 1) << id;
  }
}

TEST(Matcher, MaskMatchesBruteForceAlongJson) {
  int32_t eog;
  TokenTable table = TestVocab(&eog);
  auto g = CompileJsonSchema(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b\"c", "café"]}}},
      "required": ["name"]})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::string doc =
      "{\"name\": \"caf\xC3\xA9 \\\" \\u00e9 \xE2\x82\xAC\xF0\x9F\x98\x80\", \"age\": -12,\n"
      "  \"tags\": [\"a\", \"b\\\"c\", \"caf\xC3\xA9\"]}";
  Matcher m(*g);
  for (size_t i = 0; i < doc.size(); ++i) {
    ExpectMaskExact(m, table, doc.substr(0, i));
    ASSERT_TRUE(m.AcceptBytes(doc.substr(i, 1))) << Quoted(doc.substr(0, i + 1));
  }
  ExpectMaskExact(m, table, doc);
  EXPECT_TRUE(m.IsComplete());
  EXPECT_TRUE(m.AcceptToken(table, eog));
  EXPECT_TRUE(m.finished());
  TokenMask mask;
  m.FillMask(table, &mask);
  EXPECT_EQ(mask.Count(), 0);
}

TEST(Matcher, MaskMatchesBruteForceOnRandomWalks) {
  int32_t eog;
  TokenTable table = TestVocab(&eog);
  const std::vector<std::string> grammars = {
      "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\n"
      "term ::= [0-9]+ | \"(\" expr \")\"\n",
      "root ::= (\"na\" | \"name\" | [a-z]{2,5} \"\xC3\xA9\")+ \"!\"?\n",
      "root ::= [^\\x00-\\x7F]{1,3} \" \" [\xE2\x82\xAC-\xF0\x9F\x98\x80]*\n",
      JsonObjectGbnf(),
  };
  std::mt19937 rng(1);
  for (const std::string& gbnf : grammars) {
    auto g = Compile(gbnf);
    for (int walk = 0; walk < 3; ++walk) {
      Matcher m(g);
      std::string text;
      for (int step = 0; step < 25; ++step) {
        ExpectMaskExact(m, table, text);
        TokenMask mask;
        m.FillMask(table, &mask);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < table.vocab_size(); ++id) {
          if (mask.Test(id)) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        const int32_t id = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.AcceptToken(table, id));
        if (m.finished()) break;
        text += table.piece(id);
      }
    }
  }
}

TEST(Matcher, TokenEndingInsideACharacter) {
  int32_t eog;
  TokenTable table = TestVocab(&eog);
  Matcher m(Compile("root ::= \"caf\" [\xC3\xA0-\xC3\xBF]\n"));  // [à-ÿ]
  EXPECT_TRUE(m.AcceptBytes("caf\xC3"));   // é, à... can still follow
  EXPECT_FALSE(m.IsComplete());
  EXPECT_FALSE(m.AcceptBytes("\x80"));     // C3 80 is À: outside the class
  EXPECT_TRUE(m.AcceptBytes("\xA9"));
  EXPECT_TRUE(m.IsComplete());
  Matcher ascii(Compile("root ::= [a-z]+\n"));
  EXPECT_FALSE(ascii.AcceptBytes("\xC3"));  // no completion of C3 is in [a-z]
}

TEST(Matcher, EogOnlyWhenComplete) {
  int32_t eog;
  TokenTable table = TestVocab(&eog);
  Matcher m(Compile("root ::= \"12\" \"3\"?\n"));
  EXPECT_FALSE(m.AcceptToken(table, eog));
  EXPECT_TRUE(m.AcceptBytes("12"));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_TRUE(m.CanContinue());
  EXPECT_TRUE(m.AcceptBytes("3"));
  EXPECT_FALSE(m.CanContinue());
  EXPECT_TRUE(m.AcceptToken(table, eog + 1));
  EXPECT_FALSE(m.AcceptBytes("3"));
  m.Reset();
  EXPECT_TRUE(m.AcceptBytes("123"));
}

TEST(Matcher, RejectionLeavesStateUnchanged) {
  Matcher m(Compile("root ::= \"ab\" \"cd\"\n"));
  EXPECT_TRUE(m.AcceptBytes("a"));
  EXPECT_FALSE(m.AcceptBytes("bx"));
  EXPECT_TRUE(m.AcceptBytes("bcd"));
  EXPECT_TRUE(m.IsComplete());
}

TEST(Matcher, KeepsWorkingAcrossCacheCompaction) {
  // Each counted step is a new state: 2 x 10000 of them pass kMaxStates.
  Matcher m(Compile("root ::= \"a\"{0,10000} \"b\"{0,10000} \"c\"\n"));
  EXPECT_TRUE(m.AcceptBytes(std::string(10000, 'a')));
  EXPECT_FALSE(m.AcceptBytes("a"));
  EXPECT_TRUE(m.AcceptBytes(std::string(9000, 'b')));
  EXPECT_FALSE(m.IsComplete());
  EXPECT_TRUE(m.AcceptBytes("c"));
  EXPECT_TRUE(m.IsComplete());
  m.Reset();
  EXPECT_TRUE(m.AcceptBytes("abc"));
}

TEST(Matcher, DeepNestingIsBoundedNotFatal) {
  Matcher m(CompileJsonObject());
  std::string deep = "{\"a\":";
  for (int i = 0; i < 3000; ++i) deep += "[";
  // Past kMaxStackDepth the parse is refused rather than growing without bound.
  EXPECT_FALSE(m.AcceptBytes(deep));
  Matcher ok(CompileJsonObject());
  EXPECT_TRUE(ok.AcceptBytes("{\"a\":[[[[[[1]]]]]]}"));
  EXPECT_TRUE(ok.IsComplete());
}

TEST(Matcher, AmbiguousGrammarIsBounded) {
  // 2^40 ways to derive the empty prefix: the expansion budget refuses instead of hanging.
  std::string gbnf = "root ::=";
  for (int i = 0; i < 40; ++i) gbnf += " e";
  gbnf += " \"x\"\ne ::= \"\" | \"\"\n";
  auto g = Grammar::Parse(gbnf);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Matcher m(std::make_shared<const Grammar>(std::move(*g)));
  EXPECT_FALSE(m.AcceptBytes("x"));
  // Its mask says the same: no token (the dead start state once passed for a free-text loop,
  // found by gbnf_fuzz, so every free-text token was allowed and then refused).
  int32_t eog = 0;
  const TokenTable table = TestVocab(&eog);
  Matcher fresh(std::make_shared<const Grammar>(*Grammar::Parse(gbnf)));
  ExpectMaskExact(fresh, table, "");
}

TEST(Matcher, AStartPastTheExpansionBudgetAllowsNoToken) {
  // gbnf_fuzz's input: the start state's expansion passes kMaxExpandWork.
  Matcher m(Compile(R"(root ::= ("a" | |"ota"{0,3} | |"b" {0,3}("c" | "d")*){8})"));
  int32_t eog = 0;
  const TokenTable table = TestVocab(&eog);
  ExpectMaskExact(m, table, "");
  EXPECT_FALSE(m.AcceptBytes("a"));
}

TEST(Matcher, ExplodingAmbiguityIsBoundedAndItsMaskExact) {
  // gbnf_fuzz's timeout: every byte may open one more nested `root`, so the stacks multiply
  // with each byte. A step's work counts the stack entries it writes (kMaxExpandWork), so the
  // parse ends refused instead of growing without bound, and the mask, whose walk compacts
  // the cache when it passes its budget, stays exact until then.
  auto g = Compile(R"(root ::= [^a\\^] root {,6} .+)");
  int32_t eog = 0;
  const TokenTable table = TestVocab(&eog);
  Matcher m(g);
  std::string text;
  while (text.size() < 4096 && m.AcceptBytes("x")) {
    text += "x";
    if (text.size() % 4 == 0) ExpectMaskExact(m, table, text);
  }
  EXPECT_LT(text.size(), 4096u);
  EXPECT_GT(text.size(), 4u);
  EXPECT_FALSE(Matcher(g).AcceptBytes(text + "x"));
}

TEST(Matcher, AMaskWalkPastTheCacheBudgetStaysExact) {
  // Each printable byte is one more of at most 10000, so every step is a new state and a
  // mask's walk adds one per length of its printable tokens: near kMaxStates steps a walk
  // passes the budget and compacts the cache in its middle, keeping its path. After the ";"
  // the mask is the hand-computed one: the printable pieces, and the end of generation.
  Matcher m(Compile(R"(root ::= [ -:<-~]{0,10000} ";" [ -~]{0,10000})"));
  int32_t eog = 0;
  const TokenTable table = TestVocab(&eog);
  const auto printable = [&](int32_t id) {
    const std::string_view piece = table.piece(id);
    if (piece.empty() || table.is_eog(id)) return false;
    for (char c : piece) {
      if (c < ' ' || c > '~') return false;
    }
    return true;
  };
  TokenMask mask;
  static_assert(kMaxStates > 10064 && kMaxStates < 20000);
  for (size_t k = 0; k < kMaxStates + 64; ++k) {
    if (k + 64 >= kMaxStates) {
      m.FillMask(table, &mask);
      for (int32_t id = 0; id < table.vocab_size(); ++id) {
        ASSERT_EQ(mask.Test(id), table.is_eog(id) || printable(id))
            << "token " << id << " at " << k;
      }
    }
    ASSERT_TRUE(m.AcceptBytes(k == 10000 ? ";" : "a"));
  }
}

}  // namespace
}  // namespace kvmem::engine::grammar
