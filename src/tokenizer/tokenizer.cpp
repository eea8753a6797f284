#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cassert>
#include <unordered_map>
#include <utility>

#include "tokenizer/bpe.h"
#include "tokenizer/nfc.h"
#include "tokenizer/special_token_strip.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"

namespace kvmem::tokenizer {

// A byte trie over the texts of control and user-defined tokens, for leftmost-longest matching.
class SpecialTokenMatcher {
 public:
  struct Hit {
    int32_t id = -1;
    size_t len = 0;  // bytes
    SpecialTokenStrip strip;
  };

  // always: matched even when the caller does not parse special tokens (user-defined tokens).
  void Add(std::string_view text, int32_t id, bool always, SpecialTokenStrip strip) {
    int32_t node = 0;
    for (char c : text) {
      const uint64_t key = Key(node, c);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        it = edges_.emplace(key, static_cast<int32_t>(nodes_.size())).first;
        nodes_.emplace_back();
        if (node == 0) first_byte_[static_cast<uint8_t>(c)] = true;
      }
      node = it->second;
    }
    nodes_[node] = {id, always, strip};
  }

  // The longest enabled token that starts at text[pos], or id -1.
  Hit Match(std::string_view text, size_t pos, bool parse_special) const {
    Hit best;
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) return best;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      auto it = edges_.find(Key(node, text[i]));
      if (it == edges_.end()) break;
      node = it->second;
      const Node& n = nodes_[node];
      if (n.id >= 0 && (parse_special || n.always)) best = {n.id, i + 1 - pos, n.strip};
    }
    return best;
  }

 private:
  struct Node {
    int32_t id = -1;
    bool always = false;
    SpecialTokenStrip strip;
  };
  static uint64_t Key(int32_t node, char c) {
    return (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
  }

  std::vector<Node> nodes_{1};  // nodes_[0] is the root
  std::unordered_map<uint64_t, int32_t> edges_;
  bool first_byte_[256] = {};
};

namespace {

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0;;) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) {
      out.append(s.substr(pos));
      return out;
    }
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
}

bool IsSpecialType(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined;
}

Status CheckId(const Vocab& vocab, int32_t id, const char* name) {
  if (id == -1 || vocab.Contains(id)) return Status::Ok();
  return Corrupt(std::string(name) + " " + std::to_string(id) + " is outside the vocabulary of " +
                 std::to_string(vocab.size()));
}

// Texts of turn-ending control tokens of known chat formats (llama.cpp's EOG list).
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "<|eom_id|>",
    "<|return|>", "<|call|>",  // harmony (GPT-OSS): the reply ends, or a tool call does
};

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::Create(TokenizerConfig config) {
  Model model;
  if (config.model == "gpt2") {
    model = Model::kBpe;
  } else if (config.model == "llama") {
    model = Model::kSpm;
  } else {
    return Unsupported("tokenizer model '" + config.model + "' (supported: gpt2, llama)");
  }
  KVMEM_ASSIGN_OR_RETURN(Vocab vocab,
                         Vocab::Create(std::move(config.tokens), std::move(config.token_types),
                                       std::move(config.scores)));
  config.tokens.clear();
  config.token_types.clear();
  config.scores.clear();
  KVMEM_RETURN_IF_ERROR(CheckId(vocab, config.bos_id, "bos_token_id"));
  KVMEM_RETURN_IF_ERROR(CheckId(vocab, config.eos_id, "eos_token_id"));
  KVMEM_RETURN_IF_ERROR(CheckId(vocab, config.eot_id, "eot_token_id"));
  KVMEM_RETURN_IF_ERROR(CheckId(vocab, config.eom_id, "eom_token_id"));
  KVMEM_RETURN_IF_ERROR(CheckId(vocab, config.unk_id, "unknown_token_id"));
  KVMEM_RETURN_IF_ERROR(CheckId(vocab, config.pad_id, "padding_token_id"));
  if (config.add_bos && config.bos_id < 0) return Corrupt("add_bos is set but there is no bos");
  if (config.add_eos && config.eos_id < 0) return Corrupt("add_eos is set but there is no eos");

  Tokenizer t(std::move(vocab));
  t.model_ = model;
  if (model == Model::kBpe) {
    KVMEM_ASSIGN_OR_RETURN(t.pre_, PreTokenizerFromName(config.pre));
    t.nfc_ = PreNormalizesNfc(config.pre);
    KVMEM_ASSIGN_OR_RETURN(
        BpeModel bpe,
        BpeModel::Create(t.vocab_, config.merges, IsLlama3StylePre(config.pre), config.unk_id));
    t.bpe_ = std::make_unique<BpeModel>(std::move(bpe));
  } else {
    KVMEM_ASSIGN_OR_RETURN(SpmModel spm, SpmModel::Create(t.vocab_, config.unk_id));
    t.spm_ = std::make_unique<SpmModel>(std::move(spm));
  }
  config.merges.clear();
  config.merges.shrink_to_fit();

  t.specials_ = std::make_unique<SpecialTokenMatcher>();
  const std::vector<SpecialTokenStrip> strips =
      SpecialTokenStrips(t.vocab_, config.name, config.pre, config.architecture);
  t.pieces_.resize(t.vocab_.size());
  for (int32_t id = 0; id < t.vocab_.size(); ++id) {
    const std::string& text = t.vocab_.Text(id);
    const TokenType type = t.vocab_.Type(id);
    if (IsSpecialType(type) && !text.empty()) {
      t.specials_->Add(text, id, /*always=*/type == TokenType::kUserDefined, strips[id]);
    }
    std::string& piece = t.pieces_[id];
    if (type == TokenType::kControl || type == TokenType::kUnknown) {
      piece = text;  // shown only with render_special
    } else if (model == Model::kSpm) {
      const int byte = type == TokenType::kByte ? ParseByteToken(text) : -1;
      piece =
          byte >= 0 ? std::string(1, static_cast<char>(byte)) : ReplaceAll(text, kSpmSpace, " ");
    } else {
      piece = type == TokenType::kUserDefined ? text : BpeModel::DecodeByteLevel(text);
    }
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      for (std::string_view eot : kEndOfTurnTexts) {
        if (text == eot) t.eog_ids_.push_back(id);
      }
    }
  }
  for (int32_t id : {config.eos_id, config.eot_id, config.eom_id}) {
    if (id >= 0) t.eog_ids_.push_back(id);
  }
  // Harmony ends each message with <|end|> and the reply with <|return|> or <|call|>: where those
  // two exist, <|end|> does not end generation (llama.cpp's o200k_harmony rule).
  if (t.vocab_.Find("<|return|>") >= 0 && t.vocab_.Find("<|call|>") >= 0) {
    const int32_t end = t.vocab_.Find("<|end|>");
    t.eog_ids_.erase(std::remove(t.eog_ids_.begin(), t.eog_ids_.end(), end), t.eog_ids_.end());
  }
  std::sort(t.eog_ids_.begin(), t.eog_ids_.end());
  t.eog_ids_.erase(std::unique(t.eog_ids_.begin(), t.eog_ids_.end()), t.eog_ids_.end());
  t.config_ = std::move(config);
  return t;
}

void Tokenizer::EncodeFragment(std::string_view text, bool after_special,
                               std::vector<int32_t>* out) const {
  if (model_ == Model::kBpe) {
    std::string normalized;
    if (nfc_) {
      normalized = NormalizeNfc(text);
      text = normalized;
    }
    std::vector<std::string_view> words;
    PreTokenize(pre_, text, &words);
    for (std::string_view word : words) bpe_->EncodeWord(vocab_, word, out);
    return;
  }
  // SentencePiece: like llama.cpp, the dummy space prefix goes before the first fragment and
  // before every fragment that follows a special token.
  std::string escaped = config_.add_space_prefix && after_special ? std::string(kSpmSpace) : "";
  escaped += ReplaceAll(text, " ", kSpmSpace);
  spm_->Encode(vocab_, escaped, out);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && config_.add_bos) out.push_back(config_.bos_id);
  size_t fragment_start = 0;
  bool after_special = true;
  for (size_t pos = 0; pos < text.size();) {
    const SpecialTokenMatcher::Hit hit = specials_->Match(text, pos, parse_special);
    if (hit.id < 0) {
      ++pos;
      continue;
    }
    size_t fragment_end = pos;
    if (hit.strip.lstrip) {
      while (fragment_end > fragment_start && IsAsciiSpace(text[fragment_end - 1])) --fragment_end;
    }
    if (fragment_end > fragment_start) {
      EncodeFragment(text.substr(fragment_start, fragment_end - fragment_start), after_special,
                     &out);
    }
    out.push_back(hit.id);
    after_special = true;
    pos += hit.len;
    if (hit.strip.rstrip) {
      while (pos < text.size() && IsAsciiSpace(text[pos])) ++pos;
    }
    fragment_start = pos;
  }
  if (fragment_start < text.size()) {
    EncodeFragment(text.substr(fragment_start), after_special, &out);
  }
  if (add_special && config_.add_eos) out.push_back(config_.eos_id);
  return out;
}

std::string_view Tokenizer::TokenToPiece(int32_t id, bool render_special) const {
  assert(vocab_.Contains(id));
  const TokenType type = vocab_.Type(id);
  if (!render_special && (type == TokenType::kControl || type == TokenType::kUnknown)) return {};
  return pieces_[id];
}

Result<std::string> Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string text;
  bool at_start = true;
  for (int32_t id : ids) {
    if (!vocab_.Contains(id)) {
      return OutOfRange("token id " + std::to_string(id) + " is outside the vocabulary of " +
                        std::to_string(vocab_size()));
    }
    std::string_view piece = TokenToPiece(id, render_special);
    if (piece.empty()) continue;
    if (at_start && model_ == Model::kSpm && config_.add_space_prefix && piece[0] == ' ') {
      piece.remove_prefix(1);
    }
    at_start = false;
    text.append(piece);
  }
  return text;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

Result<std::string> StreamingDecoder::Push(int32_t id) {
  if (!tokenizer_->vocab().Contains(id)) {
    return OutOfRange("token id " + std::to_string(id) + " is outside the vocabulary of " +
                      std::to_string(tokenizer_->vocab_size()));
  }
  std::string_view piece = tokenizer_->TokenToPiece(id, render_special_);
  if (piece.empty()) return std::string();
  if (at_start_ && tokenizer_->model() == Tokenizer::Model::kSpm &&
      tokenizer_->add_space_prefix() && piece[0] == ' ') {
    piece.remove_prefix(1);
  }
  at_start_ = false;
  pending_.append(piece);
  const size_t complete = CompleteUtf8Prefix(pending_);
  std::string ready = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return ready;
}

std::string StreamingDecoder::Flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace kvmem::tokenizer
