#include "gguf/gguf_keys.h"

#include <array>
#include <cassert>

namespace kvmem::gguf {
namespace {

constexpr std::string_view kArchPrefix = "{arch}";

struct KeyEntry {
  Key key;
  std::string_view pattern;
};

// The one table of key strings. Spellings follow llama.cpp's llama-arch.cpp / gguf-py
// constants.py, which are what converters write.
constexpr std::array<KeyEntry, kNumKeys> kKeys = {{
    {Key::kGeneralArchitecture, "general.architecture"},
    {Key::kGeneralAlignment, "general.alignment"},
    {Key::kGeneralName, "general.name"},
    {Key::kGeneralFileType, "general.file_type"},
    {Key::kGeneralQuantizationVersion, "general.quantization_version"},
    {Key::kVocabSize, "{arch}.vocab_size"},
    {Key::kContextLength, "{arch}.context_length"},
    {Key::kEmbeddingLength, "{arch}.embedding_length"},
    {Key::kBlockCount, "{arch}.block_count"},
    {Key::kFeedForwardLength, "{arch}.feed_forward_length"},
    {Key::kExpertCount, "{arch}.expert_count"},
    {Key::kExpertUsedCount, "{arch}.expert_used_count"},
    {Key::kExpertFeedForwardLength, "{arch}.expert_feed_forward_length"},
    {Key::kHeadCount, "{arch}.attention.head_count"},
    {Key::kHeadCountKv, "{arch}.attention.head_count_kv"},
    {Key::kKeyLength, "{arch}.attention.key_length"},
    {Key::kValueLength, "{arch}.attention.value_length"},
    {Key::kLayerNormEps, "{arch}.attention.layer_norm_epsilon"},
    {Key::kLayerNormRmsEps, "{arch}.attention.layer_norm_rms_epsilon"},
    {Key::kSlidingWindow, "{arch}.attention.sliding_window"},
    {Key::kRopeDimensionCount, "{arch}.rope.dimension_count"},
    {Key::kRopeFreqBase, "{arch}.rope.freq_base"},
    {Key::kRopeFreqBaseSwa, "{arch}.rope.freq_base_swa"},
    {Key::kRopeScalingType, "{arch}.rope.scaling.type"},
    {Key::kRopeScalingFactor, "{arch}.rope.scaling.factor"},
    {Key::kRopeScalingOrigContextLength, "{arch}.rope.scaling.original_context_length"},
    {Key::kRopeScalingAttnFactor, "{arch}.rope.scaling.attn_factor"},
    {Key::kRopeScalingFinetuned, "{arch}.rope.scaling.finetuned"},
    {Key::kAttnLogitSoftcapping, "{arch}.attn_logit_softcapping"},
    {Key::kFinalLogitSoftcapping, "{arch}.final_logit_softcapping"},
    {Key::kTokenizerModel, "tokenizer.ggml.model"},
    {Key::kTokenizerPre, "tokenizer.ggml.pre"},
    {Key::kTokenizerTokens, "tokenizer.ggml.tokens"},
    {Key::kTokenizerScores, "tokenizer.ggml.scores"},
    {Key::kTokenizerTokenType, "tokenizer.ggml.token_type"},
    {Key::kTokenizerMerges, "tokenizer.ggml.merges"},
    {Key::kTokenizerBosId, "tokenizer.ggml.bos_token_id"},
    {Key::kTokenizerEosId, "tokenizer.ggml.eos_token_id"},
    {Key::kTokenizerEotId, "tokenizer.ggml.eot_token_id"},
    {Key::kTokenizerEomId, "tokenizer.ggml.eom_token_id"},
    {Key::kTokenizerUnknownId, "tokenizer.ggml.unknown_token_id"},
    {Key::kTokenizerPaddingId, "tokenizer.ggml.padding_token_id"},
    // Misspelt on purpose: this is the string llama.cpp and gguf-py write.
    {Key::kTokenizerSepId, "tokenizer.ggml.seperator_token_id"},
    {Key::kTokenizerAddBos, "tokenizer.ggml.add_bos_token"},
    {Key::kTokenizerAddEos, "tokenizer.ggml.add_eos_token"},
    {Key::kTokenizerAddSpacePrefix, "tokenizer.ggml.add_space_prefix"},
    {Key::kTokenizerChatTemplate, "tokenizer.chat_template"},
}};

constexpr bool TableIsInEnumOrder() {
  for (int i = 0; i < kNumKeys; ++i) {
    if (static_cast<int>(kKeys[i].key) != i) return false;
  }
  return true;
}
static_assert(TableIsInEnumOrder(), "kKeys must list every Key once, in enum order");

const KeyEntry& Entry(Key key) {
  int i = static_cast<int>(key);
  assert(i >= 0 && i < kNumKeys);
  return kKeys[i];
}

}  // namespace

std::string_view KeyPattern(Key key) { return Entry(key).pattern; }

bool KeyIsArchPrefixed(Key key) { return Entry(key).pattern.starts_with(kArchPrefix); }

std::string KeyName(Key key, std::string_view arch) {
  std::string_view pattern = Entry(key).pattern;
  if (!pattern.starts_with(kArchPrefix) || arch.empty()) return std::string(pattern);
  std::string name(arch);
  name += pattern.substr(kArchPrefix.size());
  return name;
}

}  // namespace kvmem::gguf
