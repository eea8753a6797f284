#include "tokenizer/gguf_config.h"

#include <string>
#include <utility>

#include "core/log.h"

namespace kvmem::tokenizer {
namespace {

using gguf::Key;

Status ReadId(const gguf::GgufFile& file, Key key, int32_t fallback, int32_t* out) {
  KVMEM_ASSIGN_OR_RETURN(int64_t id, file.GetIntOr(key, fallback));
  if (id < -1 || id > INT32_MAX) {
    return OutOfRange(file.Name(key) + " = " + std::to_string(id) + " is not a token id");
  }
  *out = static_cast<int32_t>(id);
  return Status::Ok();
}

}  // namespace

Result<TokenizerConfig> TokenizerConfigFromGguf(const gguf::GgufFile& file) {
  TokenizerConfig c;
  KVMEM_ASSIGN_OR_RETURN(std::string_view model, file.GetString(Key::kTokenizerModel));
  KVMEM_ASSIGN_OR_RETURN(std::string_view pre, file.GetStringOr(Key::kTokenizerPre, ""));
  c.model = std::string(model);
  c.pre = std::string(pre);
  if (c.model == "gpt2" && (c.pre.empty() || c.pre == "default")) {
    // llama.cpp's warning too: the fallback splits unlike the model's own tokenizer.
    KVMEM_LOG_WARN(
        "tokenizer: tokenizer.ggml.pre is %s; using llama.cpp's 'default' "
        "pre-tokenizer, which may not match the model's (regenerate the GGUF)",
        c.pre.empty() ? "missing" : "'default'");
  }
  c.architecture = std::string(file.architecture());
  KVMEM_ASSIGN_OR_RETURN(std::string_view name, file.GetStringOr(Key::kGeneralName, ""));
  c.name = std::string(name);
  const bool spm = c.model == "llama";

  KVMEM_ASSIGN_OR_RETURN(auto tokens, file.GetStringArray(Key::kTokenizerTokens));
  c.tokens.assign(tokens.begin(), tokens.end());
  if (file.Has(Key::kTokenizerTokenType)) {
    KVMEM_ASSIGN_OR_RETURN(c.token_types, file.GetInt32Array(Key::kTokenizerTokenType));
  }
  if (file.Has(Key::kTokenizerScores)) {
    KVMEM_ASSIGN_OR_RETURN(c.scores, file.GetFloatArray(Key::kTokenizerScores));
  }
  if (file.Has(Key::kTokenizerMerges)) {
    KVMEM_ASSIGN_OR_RETURN(auto merges, file.GetStringArray(Key::kTokenizerMerges));
    c.merges.assign(merges.begin(), merges.end());
  } else if (c.model == "gpt2") {
    return NotFound("GGUF key " + file.Name(Key::kTokenizerMerges) + " (BPE needs merges)");
  }

  KVMEM_RETURN_IF_ERROR(ReadId(file, Key::kTokenizerBosId, spm ? 1 : -1, &c.bos_id));
  KVMEM_RETURN_IF_ERROR(ReadId(file, Key::kTokenizerEosId, spm ? 2 : -1, &c.eos_id));
  KVMEM_RETURN_IF_ERROR(ReadId(file, Key::kTokenizerEotId, -1, &c.eot_id));
  KVMEM_RETURN_IF_ERROR(ReadId(file, Key::kTokenizerEomId, -1, &c.eom_id));
  KVMEM_RETURN_IF_ERROR(ReadId(file, Key::kTokenizerUnknownId, spm ? 0 : -1, &c.unk_id));
  KVMEM_RETURN_IF_ERROR(ReadId(file, Key::kTokenizerPaddingId, -1, &c.pad_id));

  KVMEM_ASSIGN_OR_RETURN(c.add_bos,
                         file.GetBoolOr(Key::kTokenizerAddBos, spm || IsLlama3StylePre(c.pre)));
  KVMEM_ASSIGN_OR_RETURN(c.add_eos, file.GetBoolOr(Key::kTokenizerAddEos, false));
  KVMEM_ASSIGN_OR_RETURN(c.add_space_prefix, file.GetBoolOr(Key::kTokenizerAddSpacePrefix, spm));
  KVMEM_ASSIGN_OR_RETURN(std::string_view chat_template,
                         file.GetStringOr(Key::kTokenizerChatTemplate, ""));
  c.chat_template = std::string(chat_template);
  return c;
}

Result<Tokenizer> LoadTokenizer(const gguf::GgufFile& file) {
  KVMEM_ASSIGN_OR_RETURN(TokenizerConfig config, TokenizerConfigFromGguf(file));
  auto tokenizer = Tokenizer::Create(std::move(config));
  if (!tokenizer.ok()) return tokenizer.status().WithContext("tokenizer");
  return tokenizer;
}

}  // namespace kvmem::tokenizer
