// GBNF text -> GrammarBuilder: a recursive-descent parser over bytes. Every error names the line
// and column (1-based, columns in bytes) and the construct that failed.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/utf8.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_builder.h"

namespace kvmem::engine::grammar {
namespace {

using Sequence = GrammarBuilder::Sequence;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Result<Grammar> Run(std::string_view root) {
    SkipSpace(/*newlines=*/true);
    while (pos_ < s_.size()) {
      KVMEM_RETURN_IF_ERROR(ParseRule());
      SkipSpace(/*newlines=*/true);
    }
    return b_.Finish(root);
  }

 private:
  Status Error(std::string what) const { return ErrorAt(pos_, std::move(what)); }
  Status ErrorAt(size_t at, std::string what) const {
    int line, col;
    LineCol(at, &line, &col);
    return InvalidArgument("grammar line " + std::to_string(line) + ", column " +
                           std::to_string(col) + ": " + what);
  }
  void LineCol(size_t at, int* line, int* col) const {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++*line;
        *col = 1;
      } else {
        ++*col;
      }
    }
  }

  bool AtEnd() const { return pos_ >= s_.size(); }
  char Peek() const { return AtEnd() ? '\0' : s_[pos_]; }

  // Blanks and comments; newlines too when `newlines`.
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // At a newline outside parentheses: whether the rule goes on ("|" starts the next non-blank
  // line). If so, moves to that "|".
  bool ContinuesOnNextLine() {
    size_t save = pos_;
    SkipSpace(/*newlines=*/true);
    if (Peek() == '|') return true;
    pos_ = save;
    return false;
  }

  std::string_view ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }

  Status ParseRule() {
    const size_t start = pos_;
    std::string_view name = ParseName();
    if (name.empty()) return Error("expected a rule name, found " + Quoted(s_.substr(pos_, 1)));
    int line, col;
    LineCol(start, &line, &col);
    KVMEM_ASSIGN_OR_RETURN(int32_t rule, b_.RuleId(name, line, col));
    SkipSpace(/*newlines=*/false);
    if (s_.substr(pos_, 3) != "::=") return Error("expected '::=' after rule name '" + std::string(name) + "'");
    pos_ += 3;
    SkipSpace(/*newlines=*/true);
    std::vector<Sequence> alts;
    KVMEM_RETURN_IF_ERROR(ParseAlternates(rule, /*depth=*/0, &alts));
    KVMEM_RETURN_IF_ERROR(b_.Define(rule, std::move(alts), line, col));
    if (!AtEnd() && Peek() != '\n') {
      return Error("unexpected " + Quoted(s_.substr(pos_, 1)) + " in rule '" + std::string(name) +
                   "'");
    }
    return Status::Ok();
  }

  Status ParseAlternates(int32_t rule, int depth, std::vector<Sequence>* alts) {
    for (;;) {
      Sequence seq;
      KVMEM_RETURN_IF_ERROR(ParseSequence(rule, depth, &seq));
      alts->push_back(std::move(seq));
      if (depth == 0 && Peek() == '\n' && !ContinuesOnNextLine()) return Status::Ok();
      if (Peek() != '|') return Status::Ok();
      ++pos_;
      SkipSpace(/*newlines=*/true);
    }
  }

  Status ParseSequence(int32_t rule, int depth, Sequence* seq) {
    size_t atom_start = std::string::npos;  // where the last atom's elements begin in *seq
    for (;;) {
      const char c = Peek();
      const size_t here = pos_;
      if (c == '"') {
        atom_start = seq->size();
        KVMEM_RETURN_IF_ERROR(ParseLiteral(seq));
      } else if (c == '[') {
        atom_start = seq->size();
        KVMEM_RETURN_IF_ERROR(ParseClass(seq));
      } else if (c == '.') {
        ++pos_;
        atom_start = seq->size();
        CharClass any;
        any.negated = true;  // the complement of nothing
        seq->push_back({Element::Kind::kChars, b_.AddClass(std::move(any))});
      } else if (c == '(') {
        if (depth + 1 > kMaxNesting) {
          return Error("parentheses nested deeper than " + std::to_string(kMaxNesting));
        }
        ++pos_;
        SkipSpace(/*newlines=*/true);
        std::vector<Sequence> alts;
        KVMEM_RETURN_IF_ERROR(ParseAlternates(rule, depth + 1, &alts));
        if (Peek() != ')') return ErrorAt(here, "unclosed '('");
        ++pos_;
        atom_start = seq->size();
        KVMEM_ASSIGN_OR_RETURN(int32_t group, b_.NewRule(rule, std::move(alts)));
        seq->push_back({Element::Kind::kRule, group});
      } else if (IsNameChar(c)) {
        int line, col;
        LineCol(pos_, &line, &col);
        std::string_view name = ParseName();
        SkipSpace(/*newlines=*/false);
        if (s_.substr(pos_, 3) == "::=") {  // the next rule began: this sequence ended
          return ErrorAt(here, "rule '" + std::string(name) +
                                   "' begins before the previous rule ended (an unclosed '(' or "
                                   "two rules on one line)");
        }
        atom_start = seq->size();
        KVMEM_ASSIGN_OR_RETURN(int32_t ref, b_.RuleId(name, line, col));
        seq->push_back({Element::Kind::kRule, ref});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (atom_start == std::string::npos) {
          return Error(std::string("repetition '") + c + "' with nothing before it");
        }
        int min = 0, max = -1;
        if (c == '{') {
          KVMEM_RETURN_IF_ERROR(ParseBraces(&min, &max));
        } else {
          ++pos_;
          if (c == '+') min = 1;
          if (c == '?') max = 1;
        }
        Status st = b_.Repeat(rule, seq, atom_start, min, max);
        if (!st.ok()) return ErrorAt(here, st.message());
        atom_start = std::string::npos;  // x** is an error, as in llama.cpp
      } else if (c == ')' || c == '|' || c == '\n' || c == '\0') {
        return Status::Ok();
      } else {
        return Error("unexpected " + Quoted(s_.substr(pos_, 1)));
      }
      SkipSpace(/*newlines=*/depth > 0);
    }
  }

  Status ParseInt(int* out) {
    const size_t start = pos_;
    long v = 0;
    while (!AtEnd() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_] - '0');
      if (v > kMaxRepetition) return ErrorAt(start, "repetition count above the limit of " +
                                                       std::to_string(kMaxRepetition));
      ++pos_;
    }
    if (pos_ == start) return Error("expected a number in '{...}'");
    *out = static_cast<int>(v);
    return Status::Ok();
  }

  // {m} {m,} {m,n} {,n}
  Status ParseBraces(int* min, int* max) {
    ++pos_;
    SkipSpace(false);
    *min = 0;
    if (Peek() != ',') KVMEM_RETURN_IF_ERROR(ParseInt(min));
    SkipSpace(false);
    if (Peek() == '}') {
      *max = *min;
    } else if (Peek() == ',') {
      ++pos_;
      SkipSpace(false);
      *max = -1;
      if (Peek() != '}') KVMEM_RETURN_IF_ERROR(ParseInt(max));
      SkipSpace(false);
    }
    if (Peek() != '}') return Error("expected '}' to close a repetition");
    ++pos_;
    return Status::Ok();
  }

  // One character of a literal or class at pos_ (escape or UTF-8).
  Status ParseChar(uint32_t* cp) {
    if (AtEnd()) return Error("unexpected end of grammar");
    const size_t start = pos_;
    if (s_[pos_] != '\\') {
      size_t len = 0;
      if (ScanUtf8(s_.substr(pos_), &len) != Utf8Scan::kValid) return Error("invalid UTF-8");
      uint32_t v = static_cast<uint8_t>(s_[pos_]);
      if (len > 1) {
        v &= 0x7Fu >> len;
        for (size_t i = 1; i < len; ++i) v = (v << 6) | (static_cast<uint8_t>(s_[pos_ + i]) & 0x3F);
      }
      pos_ += len;
      *cp = v;
      return Status::Ok();
    }
    ++pos_;
    if (AtEnd()) return Error("unexpected end of grammar after '\\'");
    const char e = s_[pos_++];
    int hex = 0;
    switch (e) {
      case 'n': *cp = '\n'; return Status::Ok();
      case 'r': *cp = '\r'; return Status::Ok();
      case 't': *cp = '\t'; return Status::Ok();
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
        *cp = static_cast<uint8_t>(e);
        return Status::Ok();
      case 'x': hex = 2; break;
      case 'u': hex = 4; break;
      case 'U': hex = 8; break;
      default:
        return ErrorAt(start, "unknown escape " + Quoted(s_.substr(start, 2)));
    }
    uint32_t v = 0;
    for (int i = 0; i < hex; ++i) {
      const char h = Peek();
      int d;
      if (h >= '0' && h <= '9') d = h - '0';
      else if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      else return ErrorAt(start, "escape '\\" + std::string(1, e) + "' needs " +
                                     std::to_string(hex) + " hex digits");
      v = (v << 4) | static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > 0x10FFFF) return ErrorAt(start, "code point above U+10FFFF");
    *cp = v;
    return Status::Ok();
  }

  Status ParseLiteral(Sequence* seq) {
    const size_t start = pos_;
    ++pos_;
    for (;;) {
      if (AtEnd() || Peek() == '\n') return ErrorAt(start, "unterminated string literal");
      if (Peek() == '"') break;
      uint32_t cp;
      KVMEM_RETURN_IF_ERROR(ParseChar(&cp));
      CharClass one;
      one.ranges.push_back({cp, cp});
      seq->push_back({Element::Kind::kChars, b_.AddClass(std::move(one))});
    }
    ++pos_;
    return Status::Ok();
  }

  Status ParseClass(Sequence* seq) {
    const size_t start = pos_;
    ++pos_;
    CharClass c;
    if (Peek() == '^') {
      c.negated = true;
      ++pos_;
    }
    for (;;) {
      if (AtEnd() || Peek() == '\n') return ErrorAt(start, "unterminated character class '['");
      if (Peek() == ']') break;
      uint32_t lo, hi;
      KVMEM_RETURN_IF_ERROR(ParseChar(&lo));
      hi = lo;
      if (Peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        KVMEM_RETURN_IF_ERROR(ParseChar(&hi));
        if (hi < lo) return ErrorAt(start, "character range with its end before its start");
      }
      c.ranges.push_back({lo, hi});
    }
    ++pos_;
    if (c.ranges.empty()) return ErrorAt(start, "empty character class '[]'");
    seq->push_back({Element::Kind::kChars, b_.AddClass(std::move(c))});
    return Status::Ok();
  }

  std::string_view s_;
  size_t pos_ = 0;
  GrammarBuilder b_;
};

}  // namespace

Result<Grammar> Grammar::Parse(std::string_view text, std::string_view root) {
  if (text.size() > kMaxGrammarBytes) {
    return InvalidArgument("grammar larger than " + std::to_string(kMaxGrammarBytes) + " bytes");
  }
  return Parser(text).Run(root);
}

}  // namespace kvmem::engine::grammar
