#include "memory/embed/wordpiece.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/utf8.h"
#include "memory/embed/bert_unicode.h"
#include "memory/store/json_util.h"
#include "tokenizer/unicode.h"

namespace kvmem::memory::embed {
namespace {

using store::Json;

constexpr uint32_t kReplacement = 0xFFFD;

bool IsWhitespace(uint32_t cp) {
  return cp == '\t' || cp == '\n' || cp == '\r' ||
         (tokenizer::CodepointFlags(cp) & tokenizer::kCpWhitespace) != 0;
}

// BertPreTokenizer's split: ASCII punctuation (which includes the symbols $+<=>^`|~) or P*.
bool IsPunctuation(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  return IsPunctuationCategory(cp);
}

void Decode(std::string_view text, std::vector<uint32_t>* out) {
  for (size_t pos = 0; pos < text.size();) {
    const tokenizer::Utf8Char c = tokenizer::DecodeUtf8(text, pos);
    out->push_back(c.valid ? c.cp : kReplacement);
    pos += c.len;
  }
}

std::string ToUtf8(const uint32_t* first, const uint32_t* last) {
  std::string s;
  for (const uint32_t* p = first; p != last; ++p) tokenizer::AppendUtf8(*p, &s);
  return s;
}

// A bool field that may be absent (default) or null (default).
Result<bool> OptionalBool(const Json& obj, const char* key, bool dflt, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return Corrupt(path + "." + key + " is not a boolean");
  return it->get<bool>();
}

Status ReadNormalizer(const Json& root, WordPieceConfig* config) {
  auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) {
    config->clean_text = config->handle_chinese_chars = false;
    config->strip_accents = config->lowercase = false;
    return Status::Ok();
  }
  const Json& n = *it;
  KVMEM_ASSIGN_OR_RETURN(std::string type, store::JsonString(n, "type", "normalizer"));
  if (type != "BertNormalizer") return Unsupported("tokenizer.json: normalizer " + type);
  KVMEM_ASSIGN_OR_RETURN(config->clean_text, OptionalBool(n, "clean_text", true, "normalizer"));
  KVMEM_ASSIGN_OR_RETURN(config->handle_chinese_chars,
                         OptionalBool(n, "handle_chinese_chars", true, "normalizer"));
  KVMEM_ASSIGN_OR_RETURN(config->lowercase, OptionalBool(n, "lowercase", true, "normalizer"));
  // strip_accents: null means "as lowercase".
  KVMEM_ASSIGN_OR_RETURN(config->strip_accents,
                         OptionalBool(n, "strip_accents", config->lowercase, "normalizer"));
  return Status::Ok();
}

Status ReadPostProcessor(const Json& root, WordPieceConfig* config) {
  auto it = root.find("post_processor");
  if (it == root.end() || it->is_null()) return Status::Ok();  // [CLS] / [SEP]
  const Json& p = *it;
  KVMEM_ASSIGN_OR_RETURN(std::string type, store::JsonString(p, "type", "post_processor"));
  if (type == "BertProcessing") {
    KVMEM_ASSIGN_OR_RETURN(const Json* cls, store::JsonArray(p, "cls", "post_processor"));
    KVMEM_ASSIGN_OR_RETURN(const Json* sep, store::JsonArray(p, "sep", "post_processor"));
    if (cls->empty() || sep->empty() || !(*cls)[0].is_string() || !(*sep)[0].is_string()) {
      return Corrupt("tokenizer.json: post_processor.cls/sep are not [token, id]");
    }
    config->cls_token = (*cls)[0].get<std::string>();
    config->sep_token = (*sep)[0].get<std::string>();
    return Status::Ok();
  }
  if (type != "TemplateProcessing") return Unsupported("tokenizer.json: post_processor " + type);
  // single: [{"SpecialToken": {"id": CLS}}, {"Sequence": {"id": "A"}}, {"SpecialToken": ...}]
  KVMEM_ASSIGN_OR_RETURN(const Json* single, store::JsonArray(p, "single", "post_processor"));
  auto special = [](const Json& e) -> const Json* {
    if (!e.is_object()) return nullptr;
    auto s = e.find("SpecialToken");
    if (s == e.end() || !s->is_object()) return nullptr;
    auto id = s->find("id");
    return id != s->end() && id->is_string() ? &*id : nullptr;
  };
  if (single->size() != 3 || special((*single)[0]) == nullptr || special((*single)[2]) == nullptr ||
      !(*single)[1].is_object() || !(*single)[1].contains("Sequence")) {
    return Unsupported("tokenizer.json: post_processor.single is not [special, A, special]");
  }
  config->cls_token = special((*single)[0])->get<std::string>();
  config->sep_token = special((*single)[2])->get<std::string>();
  return Status::Ok();
}

}  // namespace

Result<WordPieceTokenizer> WordPieceTokenizer::Create(std::vector<std::string> vocab,
                                                      WordPieceConfig config) {
  if (vocab.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return InvalidArgument("WordPiece vocabulary has too many pieces");
  }
  if (config.max_input_chars_per_word < 1) {
    return InvalidArgument("max_input_chars_per_word must be positive");
  }
  WordPieceTokenizer t;
  t.config_ = std::move(config);
  t.pieces_ = std::move(vocab);
  const std::string& prefix = t.config_.continuing_subword_prefix;
  t.word_start_.reserve(t.pieces_.size());
  for (size_t i = 0; i < t.pieces_.size(); ++i) {
    const std::string& p = t.pieces_[i];
    const int32_t id = static_cast<int32_t>(i);
    t.word_start_[p] = id;
    if (!prefix.empty() && p.size() > prefix.size() && p.starts_with(prefix)) {
      t.continuation_[p.substr(prefix.size())] = id;
    }
  }
  auto need = [&](const std::string& name, int32_t* id) -> Status {
    *id = t.PieceId(name);
    if (*id < 0) return InvalidArgument("WordPiece vocabulary lacks " + Quoted(name));
    return Status::Ok();
  };
  KVMEM_RETURN_IF_ERROR(need(t.config_.unk_token, &t.unk_id_));
  KVMEM_RETURN_IF_ERROR(need(t.config_.cls_token, &t.cls_id_));
  KVMEM_RETURN_IF_ERROR(need(t.config_.sep_token, &t.sep_id_));
  for (const std::string& a : t.config_.added_tokens) {
    if (a.empty()) return InvalidArgument("empty added token");
    int32_t id = -1;
    KVMEM_RETURN_IF_ERROR(need(a, &id));
    t.added_.emplace_back(a, id);
  }
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return t;
}

Result<WordPieceTokenizer> WordPieceTokenizer::FromVocabTxt(std::string_view text,
                                                            WordPieceConfig config) {
  std::vector<std::string> vocab;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    // Trailing whitespace is not part of a piece (transformers strips it too).
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    vocab.emplace_back(line);
    pos = end + 1;
  }
  // Added tokens the vocabulary lacks ([PAD], [MASK] of a minimal vocab) are simply not added.
  std::erase_if(config.added_tokens, [&](const std::string& a) {
    return std::find(vocab.begin(), vocab.end(), a) == vocab.end();
  });
  return Create(std::move(vocab), std::move(config));
}

Result<WordPieceTokenizer> WordPieceTokenizer::FromTokenizerJson(std::string_view json) {
  KVMEM_ASSIGN_OR_RETURN(Json root, store::ParseUntrustedJson(json, 32, "tokenizer.json"));
  if (!root.is_object()) return Corrupt("tokenizer.json is not a JSON object");
  WordPieceConfig config;
  KVMEM_RETURN_IF_ERROR(ReadNormalizer(root, &config));
  KVMEM_ASSIGN_OR_RETURN(const Json* pre, store::JsonField(root, "pre_tokenizer", ""));
  if (!pre->is_object() || pre->value("type", std::string()) != "BertPreTokenizer") {
    return Unsupported("tokenizer.json: pre_tokenizer is not BertPreTokenizer");
  }
  KVMEM_RETURN_IF_ERROR(ReadPostProcessor(root, &config));

  KVMEM_ASSIGN_OR_RETURN(const Json* model, store::JsonObject(root, "model", ""));
  KVMEM_ASSIGN_OR_RETURN(std::string type, store::JsonString(*model, "type", "model"));
  if (type != "WordPiece") return Unsupported("tokenizer.json: model type " + type);
  KVMEM_ASSIGN_OR_RETURN(config.unk_token, store::JsonString(*model, "unk_token", "model"));
  KVMEM_ASSIGN_OR_RETURN(config.continuing_subword_prefix,
                         store::JsonString(*model, "continuing_subword_prefix", "model"));
  KVMEM_ASSIGN_OR_RETURN(int64_t max_chars,
                         store::JsonInt(*model, "max_input_chars_per_word", "model", 1, 1 << 20));
  config.max_input_chars_per_word = static_cast<int>(max_chars);
  KVMEM_ASSIGN_OR_RETURN(const Json* vocab_obj, store::JsonObject(*model, "vocab", "model"));
  const size_t n = vocab_obj->size();
  std::vector<std::string> vocab(n);
  std::vector<bool> seen(n, false);
  for (auto it = vocab_obj->begin(); it != vocab_obj->end(); ++it) {
    KVMEM_ASSIGN_OR_RETURN(int64_t id, store::JsonIntValue(it.value(), "model.vocab." + it.key(), 0,
                                                           static_cast<int64_t>(n) - 1));
    if (seen[static_cast<size_t>(id)]) {
      return Corrupt("tokenizer.json: id " + std::to_string(id) + " used twice in model.vocab");
    }
    seen[static_cast<size_t>(id)] = true;
    vocab[static_cast<size_t>(id)] = it.key();
  }

  config.added_tokens.clear();
  auto added_it = root.find("added_tokens");
  if (added_it != root.end() && !added_it->is_null()) {
    if (!added_it->is_array()) return Corrupt("tokenizer.json: added_tokens is not an array");
    for (size_t i = 0; i < added_it->size(); ++i) {
      const Json& a = (*added_it)[i];
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      KVMEM_ASSIGN_OR_RETURN(std::string content, store::JsonString(a, "content", path));
      KVMEM_ASSIGN_OR_RETURN(int64_t id, store::JsonInt(a, "id", path, 0, INT32_MAX));
      for (const char* flag : {"normalized", "lstrip", "rstrip", "single_word"}) {
        KVMEM_ASSIGN_OR_RETURN(bool on, OptionalBool(a, flag, false, path));
        if (on) return Unsupported("tokenizer.json: " + path + " has " + flag + " set");
      }
      if (static_cast<size_t>(id) >= n || vocab[static_cast<size_t>(id)] != content) {
        return Unsupported("tokenizer.json: " + path + " is not the vocabulary's piece " +
                           std::to_string(id));
      }
      config.added_tokens.push_back(std::move(content));
    }
  }
  auto t = Create(std::move(vocab), std::move(config));
  if (!t.ok()) return t.status().WithContext("tokenizer.json");
  return t;
}

int32_t WordPieceTokenizer::PieceId(std::string_view piece) const {
  auto it = word_start_.find(piece);
  return it == word_start_.end() ? -1 : it->second;
}

void WordPieceTokenizer::NormalizeCodepoints(std::string_view text,
                                             std::vector<uint32_t>* out) const {
  std::vector<uint32_t> a;
  a.reserve(text.size() + 8);
  Decode(text, &a);
  std::vector<uint32_t> b;
  b.reserve(a.size() + 8);
  for (uint32_t c : a) {
    if (config_.clean_text) {
      if (c == 0 || c == kReplacement) continue;
      if (c != '\t' && c != '\n' && c != '\r' && IsControlFormatOrPrivate(c)) continue;
      if (IsWhitespace(c)) c = ' ';
    }
    if (config_.handle_chinese_chars && IsCjkIdeograph(c)) {
      b.insert(b.end(), {' ', c, ' '});
    } else {
      b.push_back(c);
    }
  }
  if (config_.strip_accents) {
    a.clear();
    AppendNfd(b.data(), b.data() + b.size(), &a);
    b.clear();
    for (uint32_t c : a) {
      if (!IsNonspacingMark(c)) b.push_back(c);
    }
  }
  if (config_.lowercase) {
    for (uint32_t c : b) AppendLowercase(c, out);
  } else {
    out->insert(out->end(), b.begin(), b.end());
  }
}

std::string WordPieceTokenizer::Normalize(std::string_view text) const {
  std::vector<uint32_t> cps;
  NormalizeCodepoints(text, &cps);
  return ToUtf8(cps.data(), cps.data() + cps.size());
}

void WordPieceTokenizer::AppendWord(const std::vector<uint32_t>& word,
                                    std::vector<int32_t>* ids) const {
  if (word.size() > static_cast<size_t>(config_.max_input_chars_per_word)) {
    ids->push_back(unk_id_);
    return;
  }
  const std::string s = ToUtf8(word.data(), word.data() + word.size());
  std::vector<size_t> offset(word.size() + 1, 0);  // byte offset of each character
  for (size_t i = 0; i < word.size(); ++i) {
    const uint32_t c = word[i];
    offset[i + 1] = offset[i] + (c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4);
  }
  const size_t first_new = ids->size();
  for (size_t start = 0; start < word.size();) {
    const PieceMap& map = start == 0 ? word_start_ : continuation_;
    size_t end = word.size();
    int32_t found = -1;
    for (; end > start; --end) {
      auto it = map.find(std::string_view(s).substr(offset[start], offset[end] - offset[start]));
      if (it != map.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {  // no segmentation of the whole word: the word is [UNK]
      ids->resize(first_new);
      ids->push_back(unk_id_);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

template <typename Fn>
void WordPieceTokenizer::ForEachWord(const std::vector<uint32_t>& cps, Fn&& fn) {
  std::vector<uint32_t> word;
  auto flush = [&]() {
    if (word.empty()) return true;
    const bool more = fn(word);
    word.clear();
    return more;
  };
  for (uint32_t c : cps) {
    if (IsWhitespace(c)) {
      if (!flush()) return;
    } else if (IsPunctuation(c)) {
      if (!flush()) return;
      word.push_back(c);
      if (!flush()) return;
    } else {
      word.push_back(c);
    }
  }
  flush();
}

void WordPieceTokenizer::AppendSegment(std::string_view text, size_t limit,
                                       std::vector<int32_t>* ids) const {
  std::vector<uint32_t> cps;
  NormalizeCodepoints(text, &cps);
  std::vector<int32_t> pieces;
  // Appends the word's pieces up to the limit; false once the limit is reached.
  ForEachWord(cps, [&](const std::vector<uint32_t>& word) {
    pieces.clear();
    AppendWord(word, &pieces);
    for (int32_t id : pieces) {
      if (ids->size() >= limit) return false;
      ids->push_back(id);
    }
    return ids->size() < limit;
  });
}

std::vector<std::string> WordPieceTokenizer::Words(std::string_view text) const {
  std::vector<uint32_t> cps;
  NormalizeCodepoints(text, &cps);
  std::vector<std::string> words;
  ForEachWord(cps, [&](const std::vector<uint32_t>& word) {
    words.push_back(ToUtf8(word.data(), word.data() + word.size()));
    return true;
  });
  return words;
}

void WordPieceTokenizer::AppendPieces(std::string_view text, size_t max_pieces,
                                      std::vector<int32_t>* ids) const {
  const size_t limit = ids->size() + max_pieces;
  size_t seg_start = 0;
  for (size_t pos = 0; pos < text.size() && ids->size() < limit;) {
    const std::pair<std::string, int32_t>* match = nullptr;
    for (const auto& a : added_) {  // longest first
      if (text.compare(pos, a.first.size(), a.first) == 0) {
        match = &a;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    AppendSegment(text.substr(seg_start, pos - seg_start), limit, ids);
    if (ids->size() >= limit) return;
    ids->push_back(match->second);
    pos += match->first.size();
    seg_start = pos;
  }
  if (ids->size() < limit) AppendSegment(text.substr(seg_start), limit, ids);
}

std::vector<int32_t> WordPieceTokenizer::Encode(std::string_view text, size_t max_len) const {
  std::vector<int32_t> ids;
  ids.push_back(cls_id_);
  AppendPieces(text, max_len > 2 ? max_len - 2 : 0, &ids);
  ids.push_back(sep_id_);
  return ids;
}

}  // namespace kvmem::memory::embed
