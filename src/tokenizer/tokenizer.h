// Text <-> token ids for the models kvmem runs, configured from a plain struct (filled from GGUF
// metadata by TokenizerConfigFromGguf, or by hand in tests):
//   model "gpt2"  byte-level BPE with a pre-tokenizer (SmolLM2, Llama-3, Qwen2)    -> bpe.h
//   model "llama" SentencePiece BPE with scores and byte fallback (Gemma, Llama-2) -> spm.h
//
// Encoding first cuts out special tokens (control tokens only when parse_special; user-defined
// tokens always), longest match first, so BPE never splits them; a token with lstrip/rstrip
// (special_token_strip.h) also drops the whitespace before/after it. The text between is
// normalized where the model's tokenizer does (NFC for Qwen2, nfc.h) and encoded by the model.
// Decoding maps each token back to its bytes; StreamingDecoder holds back a UTF-8 character split
// across tokens until it is complete.
//
// Thread-safety: a Tokenizer is immutable after Create; concurrent Encode/Decode calls are safe.
// A StreamingDecoder is per-stream state and must not be shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/vocab.h"

namespace kvmem::tokenizer {

struct TokenizerConfig {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    // tokenizer.ggml.pre: "smollm", "llama-bpe", "qwen2", "gpt2", "default", ...
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // TokenType values; empty = all normal
  std::vector<float> scores;         // SentencePiece merge priorities; empty = all 0
  std::vector<std::string> merges;   // byte-level BPE: "left right", best first
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::string chat_template;  // tokenizer.chat_template (Jinja source; see chat_template.h)
  std::string architecture;   // general.architecture
  std::string name;           // general.name (llama.cpp sets special tokens' rstrip by it)
};

class BpeModel;
class SpmModel;
class SpecialTokenMatcher;

class Tokenizer {
 public:
  enum class Model { kBpe, kSpm };

  static Result<Tokenizer> Create(TokenizerConfig config);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special: prepend BOS / append EOS where the model's config asks for them.
  // parse_special: control-token texts such as "<|im_start|>" in `text` become their ids; when
  // false they are encoded as plain text. Never fails: invalid UTF-8 is encoded byte by byte.
  std::vector<int32_t> Encode(std::string_view text, bool add_special = true,
                              bool parse_special = false) const;

  // The bytes token `id` stands for (may be part of a UTF-8 character). Control and unknown
  // tokens are "" unless render_special. Precondition: 0 <= id < vocab_size().
  std::string_view TokenToPiece(int32_t id, bool render_special = false) const;

  // Concatenated pieces; with add_space_prefix (SentencePiece) the space added in front of the
  // text is dropped again. OutOfRange for an id outside the vocabulary.
  Result<std::string> Decode(std::span<const int32_t> ids, bool render_special = false) const;

  Model model() const { return model_; }
  PreTokenizerKind pre_tokenizer() const { return pre_; }
  int32_t vocab_size() const { return vocab_.size(); }
  const Vocab& vocab() const { return vocab_; }
  // The id of the token whose text is exactly `text`, or -1.
  int32_t FindToken(std::string_view text) const { return vocab_.Find(text); }

  int32_t bos_id() const { return config_.bos_id; }
  int32_t eos_id() const { return config_.eos_id; }
  int32_t eot_id() const { return config_.eot_id; }
  int32_t eom_id() const { return config_.eom_id; }
  int32_t unk_id() const { return config_.unk_id; }
  int32_t pad_id() const { return config_.pad_id; }
  bool add_bos() const { return config_.add_bos; }
  bool add_eos() const { return config_.add_eos; }
  bool add_space_prefix() const { return config_.add_space_prefix; }
  const std::string& chat_template() const { return config_.chat_template; }
  const std::string& architecture() const { return config_.architecture; }

  // End of generation: eos, eot, eom, and control tokens that end a turn in known chat formats
  // ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>", ...), as llama.cpp does.
  bool IsEndOfGeneration(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }

 private:
  explicit Tokenizer(Vocab vocab);
  void EncodeFragment(std::string_view text, bool after_special, std::vector<int32_t>* out) const;

  TokenizerConfig config_;  // tokens/types/scores/merges moved out into vocab_ and the models
  Model model_ = Model::kBpe;
  PreTokenizerKind pre_ = PreTokenizerKind::kGpt2;
  bool nfc_ = false;  // NFC-normalize text before pre-tokenizing (PreNormalizesNfc)
  Vocab vocab_;
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<SpmModel> spm_;
  std::unique_ptr<SpecialTokenMatcher> specials_;
  std::vector<std::string> pieces_;  // decoded bytes of every token, index = id
  std::vector<int32_t> eog_ids_;
};

// Turns a stream of generated ids into text chunks that are always whole UTF-8 characters.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer* tokenizer, bool render_special = false)
      : tokenizer_(tokenizer), render_special_(render_special) {}

  // Text that became complete with `id`; "" while a character is still incomplete.
  Result<std::string> Push(int32_t id);
  // Whatever is still held back (an incomplete sequence at the end of the stream, as raw bytes).
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace kvmem::tokenizer
