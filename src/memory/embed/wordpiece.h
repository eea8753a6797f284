// BERT's WordPiece tokenizer as Hugging Face `tokenizers` runs it from a sentence-transformers
// checkpoint's tokenizer.json (or, lacking one, from vocab.txt with BERT-uncased settings):
//
//   1. added tokens ([CLS], [SEP], [MASK], ...) are matched in the raw text first and map to
//      their ids directly (leftmost, longest first; they are never normalized);
//   2. BertNormalizer on the rest: clean_text drops NUL, U+FFFD, Cc/Cf/Co characters other than
//      \t \n \r and turns White_Space into ' '; handle_chinese_chars puts spaces around CJK
//      ideographs; strip_accents (default: = lowercase) is NFD followed by dropping Mn marks;
//      lowercase is the per-character full lowercase mapping;
//   3. BertPreTokenizer: split on White_Space (dropped) and on punctuation (ASCII punctuation or
//      Unicode P*; each mark is a word of its own);
//   4. WordPiece: greedy longest-match-first over each word, continuation pieces prefixed with
//      "##"; a word with no complete segmentation, or longer than max_input_chars_per_word
//      characters, becomes [UNK];
//   5. [CLS] pieces [SEP], the pieces cut to max_len - 2 (truncation of one sequence).
//
// Invalid UTF-8 decodes one byte at a time to U+FFFD, which clean_text drops (Python cannot hand
// such bytes to the reference at all).
//
// Thread-safe: immutable after construction; every method is const.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace kvmem::memory::embed {

struct WordPieceConfig {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;
  bool lowercase = true;
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string continuing_subword_prefix = "##";
  int max_input_chars_per_word = 100;
  // Matched in the raw text before normalization; each must be in the vocabulary.
  std::vector<std::string> added_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
};

class WordPieceTokenizer {
 public:
  // vocab[id] is the piece with that id (a repeated piece keeps its last id). InvalidArgument
  // if [UNK], [CLS], [SEP] or an added token is missing, or there are 2^31 pieces or more.
  static Result<WordPieceTokenizer> Create(std::vector<std::string> vocab, WordPieceConfig config);
  // A Hugging Face tokenizer.json with a BertNormalizer (or none), a BertPreTokenizer and a
  // WordPiece model; anything else is Unsupported, malformed files are Corrupt.
  static Result<WordPieceTokenizer> FromTokenizerJson(std::string_view json);
  // vocab.txt: one piece per line, id = line number; config as given, except that added tokens
  // missing from the vocabulary are left out.
  static Result<WordPieceTokenizer> FromVocabTxt(std::string_view text, WordPieceConfig config);

  // Step 2 of the header on text without added tokens (UTF-8 in, UTF-8 out).
  std::string Normalize(std::string_view text) const;
  // Steps 2 and 3: the words WordPiece segments.
  std::vector<std::string> Words(std::string_view text) const;
  // [CLS] pieces [SEP], at most max_len ids (max_len >= 2). Word segmentation stops at the
  // limit (normalization still covers the text up to the next added token: linear time).
  std::vector<int32_t> Encode(std::string_view text, size_t max_len) const;
  // The pieces alone (no [CLS]/[SEP]), at most max_pieces of them, appended to *ids.
  void AppendPieces(std::string_view text, size_t max_pieces, std::vector<int32_t>* ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t unk_id() const { return unk_id_; }
  // -1 when absent.
  int32_t PieceId(std::string_view piece) const;
  const std::string& Piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  const WordPieceConfig& config() const { return config_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  WordPieceTokenizer() = default;
  // Normalizes, pre-tokenizes and segments one stretch of text without added tokens, appending
  // pieces while ids->size() < limit.
  void AppendSegment(std::string_view text, size_t limit, std::vector<int32_t>* ids) const;
  void AppendWord(const std::vector<uint32_t>& word, std::vector<int32_t>* ids) const;
  // Step 3: fn(word) for each word of normalized text until fn returns false.
  template <typename Fn>
  static void ForEachWord(const std::vector<uint32_t>& cps, Fn&& fn);
  // Step 2 on code points.
  void NormalizeCodepoints(std::string_view text, std::vector<uint32_t>* out) const;

  WordPieceConfig config_;
  std::vector<std::string> pieces_;                     // by id
  PieceMap word_start_;                                 // every piece (what a word may start with)
  PieceMap continuation_;                               // pieces "##x", keyed by "x"
  std::vector<std::pair<std::string, int32_t>> added_;  // longest first
  int32_t cls_id_ = -1;
  int32_t sep_id_ = -1;
  int32_t unk_id_ = -1;
};

}  // namespace kvmem::memory::embed
