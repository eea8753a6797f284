// Grammar::Parse: what it accepts (checked through the matcher) and how it refuses bad text.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"

namespace kvmem::engine::grammar {
namespace {

// Whether the grammar accepts exactly `text`.
bool Accepts(const std::string& gbnf, const std::string& text) {
  auto g = Grammar::Parse(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return false;
  Matcher m(std::make_shared<const Grammar>(std::move(*g)));
  return m.AcceptBytes(text) && m.IsComplete();
}

std::string ParseError(const std::string& gbnf) {
  auto g = Grammar::Parse(gbnf);
  EXPECT_FALSE(g.ok()) << "parsed: " << gbnf;
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), ErrorCode::kInvalidArgument);
  return g.status().message();
}

TEST(GbnfParse, LiteralsSequencesAlternation) {
  const std::string g = "root ::= \"ab\" \"c\" | \"x\"\n";
  EXPECT_TRUE(Accepts(g, "abc"));
  EXPECT_TRUE(Accepts(g, "x"));
  EXPECT_FALSE(Accepts(g, "ab"));
  EXPECT_FALSE(Accepts(g, "abcx"));
  EXPECT_FALSE(Accepts(g, ""));
}

TEST(GbnfParse, RulesCommentsAndContinuationLines) {
  const std::string g =
      "# a comment line\n"
      "root ::= greeting \" \" name   # trailing comment\n"
      "\n"
      "greeting ::= \"hi\"\n"
      "  | \"hello\"\n"
      "name ::= (\n"
      "  \"bob\" |\n"
      "  \"alice\"\n"
      ")\n";
  EXPECT_TRUE(Accepts(g, "hi bob"));
  EXPECT_TRUE(Accepts(g, "hello alice"));
  EXPECT_FALSE(Accepts(g, "hello  alice"));
}

TEST(GbnfParse, Repetition) {
  EXPECT_TRUE(Accepts("root ::= \"a\"*", ""));
  EXPECT_TRUE(Accepts("root ::= \"a\"*", "aaaa"));
  EXPECT_FALSE(Accepts("root ::= \"a\"+", ""));
  EXPECT_TRUE(Accepts("root ::= \"a\"+", "aaa"));
  EXPECT_TRUE(Accepts("root ::= \"a\"? \"b\"", "b"));
  EXPECT_TRUE(Accepts("root ::= \"a\"? \"b\"", "ab"));
  EXPECT_FALSE(Accepts("root ::= \"a\"? \"b\"", "aab"));
  const std::string g = "root ::= \"ab\"{2,3}";
  EXPECT_FALSE(Accepts(g, "ab"));
  EXPECT_TRUE(Accepts(g, "abab"));
  EXPECT_TRUE(Accepts(g, "ababab"));
  EXPECT_FALSE(Accepts(g, "abababab"));
  EXPECT_FALSE(Accepts(g, "aba"));
  EXPECT_TRUE(Accepts("root ::= [0-9]{3}", "123"));
  EXPECT_FALSE(Accepts("root ::= [0-9]{3}", "12"));
  EXPECT_TRUE(Accepts("root ::= [0-9]{2,}", "12345"));
  EXPECT_FALSE(Accepts("root ::= [0-9]{2,}", "1"));
  EXPECT_TRUE(Accepts("root ::= [0-9]{,2}", ""));
  EXPECT_FALSE(Accepts("root ::= [0-9]{,2}", "123"));
  EXPECT_TRUE(Accepts("root ::= (\"x\" [0-9])+ \"!\"", "x1x2!"));
}

TEST(GbnfParse, ClassesAnyAndEscapes) {
  EXPECT_TRUE(Accepts("root ::= [a-zA-Z_]+", "Hello_"));
  EXPECT_FALSE(Accepts("root ::= [a-z]+", "Hello"));
  EXPECT_TRUE(Accepts("root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"", "\"any é ∑ text\""));
  EXPECT_FALSE(Accepts("root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"", "\"a\"b\""));
  EXPECT_TRUE(Accepts("root ::= . . .", "a€😀"));
  EXPECT_FALSE(Accepts("root ::= . .", "a"));
  EXPECT_TRUE(Accepts("root ::= \"\\n\\t\\x41\\u00e9\\U0001F600\"", "\n\tAé😀"));
  EXPECT_TRUE(Accepts("root ::= [\\x00-\\x1F\\]\\-]+", "\x01]-"));
  EXPECT_TRUE(Accepts("root ::= [à-ÿ]", "é"));
  EXPECT_FALSE(Accepts("root ::= [à-ÿ]", "e"));
  EXPECT_TRUE(Accepts("root ::= \"é\"", "é"));
}

TEST(GbnfParse, RefusesMalformedUtf8Input) {
  EXPECT_FALSE(Accepts("root ::= .+", "\xC0\x80"));      // overlong
  EXPECT_FALSE(Accepts("root ::= .+", "\xED\xA0\x80"));  // surrogate
  EXPECT_FALSE(Accepts("root ::= .+", "\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(Accepts("root ::= .+", "\xFF"));
}

TEST(GbnfParse, ErrorsNameLineColumnAndConstruct) {
  EXPECT_NE(ParseError("root ::= foo\n").find("line 1, column 10: rule 'foo' is used but never "
                                                "defined"),
            std::string::npos);
  EXPECT_NE(ParseError("item ::= \"x\"\n").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(ParseError("root ::= \"x\"\nroot ::= \"y\"\n").find("defined twice"),
            std::string::npos);
  EXPECT_NE(ParseError("root ::= \"abc\n").find("line 1, column 10: unterminated string"),
            std::string::npos);
  EXPECT_NE(ParseError("root ::= [abc\n").find("unterminated character class"), std::string::npos);
  EXPECT_NE(ParseError("root ::= []\n").find("empty character class"), std::string::npos);
  EXPECT_NE(ParseError("root ::= [z-a]\n").find("end before its start"), std::string::npos);
  EXPECT_NE(ParseError("root ::= ( \"a\"\n").find("unclosed '('"), std::string::npos);
  EXPECT_NE(ParseError("root ::= \"a\" )\n").find("unexpected ')'"), std::string::npos);
  EXPECT_NE(ParseError("root ::= * \"a\"\n").find("repetition '*' with nothing before it"),
            std::string::npos);
  EXPECT_NE(ParseError("root ::= \"a\"{3,1}\n").find("n < m"), std::string::npos);
  EXPECT_NE(ParseError("root ::= \"a\"{99999}\n").find("limit"), std::string::npos);
  EXPECT_NE(ParseError("root ::= \"a\"{2\n").find("expected '}'"), std::string::npos);
  EXPECT_NE(ParseError("root ::= \"\\q\"\n").find("unknown escape"), std::string::npos);
  EXPECT_NE(ParseError("root ::= \"\\x4\"\n").find("hex digits"), std::string::npos);
  EXPECT_NE(ParseError("root := \"a\"\n").find("line 1, column 6: expected '::='"),
            std::string::npos);
  EXPECT_NE(ParseError("root ::= \"a\"\n\n  ::= \"b\"\n").find("line 3, column 3: expected a rule "
                                                             "name"),
            std::string::npos);
  EXPECT_NE(ParseError("root ::= \"a\" b ::= \"c\"\n").find("begins before the previous rule"),
            std::string::npos);
  EXPECT_NE(ParseError("root ::= \"\xFF\"\n").find("invalid UTF-8"), std::string::npos);
  EXPECT_NE(ParseError("root ::= \"\"*\n").find("empty literal"), std::string::npos);
}

TEST(GbnfParse, RefusesLeftRecursion) {
  EXPECT_NE(ParseError("root ::= root \"a\" | \"b\"\n").find("left-recursive (root -> root)"),
            std::string::npos);
  EXPECT_NE(ParseError("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"\n").find("left-recursive"),
            std::string::npos);
  // Through a rule that can match nothing.
  EXPECT_NE(ParseError("root ::= opt root \"x\" | \"y\"\nopt ::= \"o\"?\n").find("left-recursive"),
            std::string::npos);
  // Right recursion is fine.
  EXPECT_TRUE(Accepts("root ::= \"a\" root | \"b\"\n", "aaab"));
}

TEST(GbnfParse, RefusesRulesThatNeverComplete) {
  EXPECT_NE(ParseError("root ::= \"a\" root\n").find("can never complete"), std::string::npos);
}

TEST(GbnfParse, BoundsHostileSizes) {
  // Nested repetition stays small (each copy of a group is one reference)...
  EXPECT_TRUE(Grammar::Parse("root ::= ((\"a\"{10000}){10000}){10000}\n").ok());
  // ...but copies of copies past the element limit are refused, quickly.
  std::string wide = "root ::=";
  for (int i = 0; i < 120; ++i) wide += " \"a\"{10000}";
  EXPECT_NE(ParseError(wide + "\n").find("too large"), std::string::npos);
  std::string deep = "root ::= ";
  for (int i = 0; i < 100; ++i) deep += "(";
  deep += "\"a\"";
  for (int i = 0; i < 100; ++i) deep += ")";
  EXPECT_NE(ParseError(deep + "\n").find("nested deeper"), std::string::npos);
  EXPECT_NE(ParseError(std::string(kMaxGrammarBytes + 1, ' ')).find("larger than"),
            std::string::npos);
}

TEST(GbnfParse, ToStringRoundTrips) {
  auto g = Grammar::Parse("root ::= \"a\" [b-d]* (\"e\" | \"\\n\")? .\n");
  ASSERT_TRUE(g.ok());
  auto again = Grammar::Parse(g->ToString());
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << g->ToString();
  // The same rules (generated ones may come in another order).
  auto lines = [](std::string s) {
    std::vector<std::string> out;
    for (size_t p; (p = s.find('\n')) != std::string::npos; s.erase(0, p + 1)) {
      out.push_back(s.substr(0, p));
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(lines(again->ToString()), lines(g->ToString()));
}

}  // namespace
}  // namespace kvmem::engine::grammar
