#include "tokenizer/pretokenize.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "tokenizer/unicode.h"

namespace kvmem::tokenizer {
namespace {

// One decoded character of the input.
struct Char {
  uint32_t offset;  // byte offset in the text
  uint32_t cp;      // code point; for an invalid byte, a value no pattern names
  uint16_t flags;
};

constexpr uint32_t kInvalidCp = 0xFFFFFFFF;

bool IsL(const Char& c) { return c.flags & kCpLetter; }
bool IsN(const Char& c) { return c.flags & kCpNumber; }
bool IsS(const Char& c) { return c.flags & kCpWhitespace; }
// [^\s\p{L}\p{N}]
bool IsOther(const Char& c) { return !(c.flags & (kCpLetter | kCpNumber | kCpWhitespace)); }
bool IsCrLf(const Char& c) { return c.cp == '\r' || c.cp == '\n'; }

uint32_t Lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

// Matches the contraction alternatives at chars[i]: 's 't 're 've 'm 'll 'd. Returns the length
// in characters, 0 when none matches.
size_t MatchContraction(const std::vector<Char>& chars, size_t i, size_t end, bool ignore_case) {
  if (chars[i].cp != '\'' || i + 1 >= end) return 0;
  auto at = [&](size_t k) { return ignore_case ? Lower(chars[k].cp) : chars[k].cp; };
  const uint32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= end) return 0;
  const uint32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

template <typename Pred>
size_t RunEnd(const std::vector<Char>& chars, size_t i, size_t end, Pred pred) {
  while (i < end && pred(chars[i])) ++i;
  return i;
}

// \s+(?!\S)|\s+ at a whitespace character: the whole run at the end of the text; otherwise the
// run minus its last character (which then joins the next word), or the single character.
size_t MatchWhitespace(const std::vector<Char>& chars, size_t i, size_t end) {
  const size_t run_end = RunEnd(chars, i, end, IsS);
  if (run_end == end) return run_end - i;
  return run_end - i >= 2 ? run_end - i - 1 : 1;
}

size_t MatchGpt2(const std::vector<Char>& chars, size_t i, size_t end) {
  if (size_t n = MatchContraction(chars, i, end, /*ignore_case=*/false)) return n;
  const Char& c = chars[i];
  const bool space_then = c.cp == ' ' && i + 1 < end;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
  for (auto pred : {IsL, IsN, IsOther}) {
    if (pred(c)) return RunEnd(chars, i, end, pred) - i;
    if (space_then && pred(chars[i + 1])) return RunEnd(chars, i + 1, end, pred) - i;
  }
  return MatchWhitespace(chars, i, end);
}

size_t MatchLlama3(const std::vector<Char>& chars, size_t i, size_t end, size_t max_digits) {
  if (size_t n = MatchContraction(chars, i, end, /*ignore_case=*/true)) return n;
  const Char& c = chars[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (IsL(c)) return RunEnd(chars, i, end, IsL) - i;
  if (!IsN(c) && !IsCrLf(c) && i + 1 < end && IsL(chars[i + 1])) {
    return RunEnd(chars, i + 1, end, IsL) - i;
  }
  // \p{N}{1,max_digits}
  if (IsN(c)) return std::min(RunEnd(chars, i, end, IsN) - i, max_digits);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t start = i;
  if (c.cp == ' ' && i + 1 < end && IsOther(chars[i + 1])) start = i + 1;
  if (IsOther(chars[start])) {
    const size_t other_end = RunEnd(chars, start, end, IsOther);
    return RunEnd(chars, other_end, end, IsCrLf) - i;
  }
  // \s*[\r\n]+ : up to and including the last CR/LF of the whitespace run.
  const size_t run_end = RunEnd(chars, i, end, IsS);
  for (size_t k = run_end; k > i; --k) {
    if (IsCrLf(chars[k - 1])) return k - i;
  }
  return MatchWhitespace(chars, i, end);
}

// o200k (GPT-4o, GPT-OSS): words are a run of "upper" letters then "lower" ones, where Lm, Lo
// and marks count as both, with an optional contraction after them.
bool IsUpperish(const Char& c) {  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  return (c.flags & kCpMark) || ((c.flags & kCpLetter) && !(c.flags & kCpLower));
}
bool IsLowerish(const Char& c) {  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  return (c.flags & kCpMark) || ((c.flags & kCpLetter) && !(c.flags & kCpUpper));
}
// [^\r\n\p{L}\p{N}]
bool IsWordLead(const Char& c) { return !IsL(c) && !IsN(c) && !IsCrLf(c); }

// U*W+ at s (U = upperish, W = lowerish) as a backtracking regex takes it: the longest U run
// that still leaves a W character after it, then the whole W run. Returns the end, or s.
size_t MatchUpperStarLowerPlus(const std::vector<Char>& chars, size_t s, size_t end) {
  for (size_t k = RunEnd(chars, s, end, IsUpperish);; --k) {
    if (k < end && IsLowerish(chars[k])) return RunEnd(chars, k, end, IsLowerish);
    if (k == s) return s;
  }
}

// U+W* at s. Returns the end, or s.
size_t MatchUpperPlusLowerStar(const std::vector<Char>& chars, size_t s, size_t end) {
  const size_t upper_end = RunEnd(chars, s, end, IsUpperish);
  if (upper_end == s) return s;
  return RunEnd(chars, upper_end, end, IsLowerish);
}

size_t MatchO200k(const std::vector<Char>& chars, size_t i, size_t end) {
  // [^\r\n\p{L}\p{N}]?U*W+C? then [^\r\n\p{L}\p{N}]?U+W*C?, the optional lead tried first.
  for (auto word : {MatchUpperStarLowerPlus, MatchUpperPlusLowerStar}) {
    for (size_t s : {i + 1, i}) {
      if (s == i + 1 && (s >= end || !IsWordLead(chars[i]))) continue;
      const size_t e = word(chars, s, end);
      if (e > s) return e - i + (e < end ? MatchContraction(chars, e, end, true) : 0);
    }
  }
  const Char& c = chars[i];
  if (IsN(c)) return std::min<size_t>(RunEnd(chars, i, end, IsN) - i, 3);
  // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
  size_t start = i;
  if (c.cp == ' ' && i + 1 < end && IsOther(chars[i + 1])) start = i + 1;
  if (IsOther(chars[start])) {
    const size_t other_end = RunEnd(chars, start, end, IsOther);
    return RunEnd(chars, other_end, end,
                  [](const Char& ch) { return IsCrLf(ch) || ch.cp == '/'; }) -
           i;
  }
  const size_t run_end = RunEnd(chars, i, end, IsS);
  for (size_t k = run_end; k > i; --k) {
    if (IsCrLf(chars[k - 1])) return k - i;
  }
  return MatchWhitespace(chars, i, end);
}

void SplitRange(PreTokenizerKind kind, const std::vector<Char>& chars, size_t begin, size_t end,
                std::string_view text, std::vector<std::string_view>* words) {
  size_t i = begin;
  while (i < end) {
    size_t n = 0;
    switch (kind) {
      case PreTokenizerKind::kGpt2:
      case PreTokenizerKind::kSmolLm:
      case PreTokenizerKind::kDefault:
        n = MatchGpt2(chars, i, end);
        break;
      case PreTokenizerKind::kLlama3:
        n = MatchLlama3(chars, i, end, 3);
        break;
      case PreTokenizerKind::kQwen2:
        n = MatchLlama3(chars, i, end, 1);
        break;
      case PreTokenizerKind::kGpt4o:
        n = MatchO200k(chars, i, end);
        break;
    }
    const size_t j = i + n;
    const size_t from = chars[i].offset;
    const size_t to = j < chars.size() ? chars[j].offset : text.size();
    words->push_back(text.substr(from, to - from));
    i = j;
  }
}

using Range = std::pair<size_t, size_t>;  // [begin, end) in characters

// Cuts each range into maximal runs on which pred is constant (matches of `pred+` and the text
// between them).
template <typename Pred>
std::vector<Range> SplitRuns(const std::vector<Char>& chars, const std::vector<Range>& in,
                             Pred pred) {
  std::vector<Range> out;
  for (auto [b, e] : in) {
    for (size_t i = b; i < e;) {
      const bool inside = pred(chars[i]);
      const size_t j = RunEnd(chars, i, e, [&](const Char& c) { return pred(c) == inside; });
      out.emplace_back(i, j);
      i = j;
    }
  }
  return out;
}

bool IsAsciiDigit(const Char& c) { return c.cp >= '0' && c.cp <= '9'; }

// llama.cpp's fallback pre-tokenizer (LLAMA_VOCAB_PRE_TYPE_DEFAULT): four regexes, each cutting
// the words of the one before, the text between matches kept as words:
//   [\p{P}\$\+<=>\^~\|]+   GPT-2's regex   \p{N}+   [0-9][0-9][0-9]
std::vector<Range> SplitDefault(const std::vector<Char>& chars) {
  auto punct = [](const Char& c) {
    return (c.flags & kCpPunct) || c.cp == '$' || c.cp == '+' || c.cp == '<' || c.cp == '=' ||
           c.cp == '>' || c.cp == '^' || c.cp == '~' || c.cp == '|';
  };
  const std::vector<Range> stage1 = SplitRuns(chars, {{0, chars.size()}}, punct);
  std::vector<Range> stage2;
  for (auto [b, e] : stage1) {
    for (size_t i = b; i < e;) {
      const size_t j = i + MatchGpt2(chars, i, e);
      stage2.emplace_back(i, j);
      i = j;
    }
  }
  const std::vector<Range> stage3 = SplitRuns(chars, stage2, IsN);
  std::vector<Range> out;
  for (auto [b, e] : stage3) {
    size_t gap = b;
    for (size_t i = b; i + 3 <= e;) {
      if (IsAsciiDigit(chars[i]) && IsAsciiDigit(chars[i + 1]) && IsAsciiDigit(chars[i + 2])) {
        if (i > gap) out.emplace_back(gap, i);
        out.emplace_back(i, i + 3);
        i += 3;
        gap = i;
      } else {
        ++i;
      }
    }
    if (gap < e) out.emplace_back(gap, e);
  }
  return out;
}

}  // namespace

Result<PreTokenizerKind> PreTokenizerFromName(std::string_view name) {
  static constexpr struct {
    std::string_view name;
    PreTokenizerKind kind;
  } kNames[] = {
      // clang-format off
      {"", PreTokenizerKind::kDefault},
      {"default", PreTokenizerKind::kDefault},
      {"gpt2", PreTokenizerKind::kGpt2},
      {"gpt-2", PreTokenizerKind::kGpt2},
      {"mpt", PreTokenizerKind::kGpt2},
      {"olmo", PreTokenizerKind::kGpt2},
      {"jais", PreTokenizerKind::kGpt2},
      {"trillion", PreTokenizerKind::kGpt2},
      {"smollm", PreTokenizerKind::kSmolLm},
      {"starcoder", PreTokenizerKind::kSmolLm},
      {"refact", PreTokenizerKind::kSmolLm},
      {"command-r", PreTokenizerKind::kSmolLm},
      {"codeshell", PreTokenizerKind::kSmolLm},
      {"exaone", PreTokenizerKind::kSmolLm},
      {"minerva-7b", PreTokenizerKind::kSmolLm},
      {"llama-bpe", PreTokenizerKind::kLlama3},
      {"llama3", PreTokenizerKind::kLlama3},
      {"llama-v3", PreTokenizerKind::kLlama3},
      {"falcon3", PreTokenizerKind::kLlama3},
      {"dbrx", PreTokenizerKind::kLlama3},
      {"smaug-bpe", PreTokenizerKind::kLlama3},
      {"qwen2", PreTokenizerKind::kQwen2},
      {"stablelm2", PreTokenizerKind::kQwen2},
      {"deepseek-r1-qwen", PreTokenizerKind::kQwen2},
      {"megrez", PreTokenizerKind::kQwen2},
      {"hunyuan", PreTokenizerKind::kQwen2},
      {"gpt-4o", PreTokenizerKind::kGpt4o},
      {"llama4", PreTokenizerKind::kGpt4o},
      // clang-format on
  };
  for (const auto& entry : kNames) {
    if (entry.name == name) return entry.kind;
  }
  return Unsupported("unknown pre-tokenizer '" + std::string(name) +
                     "' (GGUF key tokenizer.ggml.pre; kvmem knows the gpt2, smollm, llama-bpe, "
                     "qwen2, gpt-4o and default families)");
}

bool PreNormalizesNfc(std::string_view name) {
  return name == "qwen2" || name == "deepseek-r1-qwen";
}

bool IsLlama3StylePre(std::string_view name) {
  return name == "llama-bpe" || name == "llama3" || name == "llama-v3" || name == "falcon3";
}

const char* PreTokenizerName(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      return "gpt2";
    case PreTokenizerKind::kSmolLm:
      return "smollm";
    case PreTokenizerKind::kLlama3:
      return "llama-bpe";
    case PreTokenizerKind::kQwen2:
      return "qwen2";
    case PreTokenizerKind::kGpt4o:
      return "gpt-4o";
    case PreTokenizerKind::kDefault:
      return "default";
  }
  return "?";
}

void PreTokenize(PreTokenizerKind kind, std::string_view text,
                 std::vector<std::string_view>* words) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char u = DecodeUtf8(text, pos);
    chars.push_back({static_cast<uint32_t>(pos), u.valid ? u.cp : kInvalidCp, CharFlags(u)});
    pos += u.len;
  }
  if (kind == PreTokenizerKind::kDefault) {
    for (auto [b, e] : SplitDefault(chars)) {
      const size_t from = chars[b].offset;
      const size_t to = e < chars.size() ? chars[e].offset : text.size();
      words->push_back(text.substr(from, to - from));
    }
    return;
  }
  if (kind != PreTokenizerKind::kSmolLm) {
    SplitRange(kind, chars, 0, chars.size(), text, words);
    return;
  }
  // Isolate each number character; the stretches between are split on their own, so a word
  // never runs into or across a digit.
  size_t begin = 0;
  for (size_t i = 0; i <= chars.size(); ++i) {
    if (i < chars.size() && !IsN(chars[i])) continue;
    SplitRange(kind, chars, begin, i, text, words);
    if (i < chars.size()) SplitRange(kind, chars, i, i + 1, text, words);
    begin = i + 1;
  }
}

}  // namespace kvmem::tokenizer
