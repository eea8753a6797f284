// Typed GGUF metadata keys: every key kvmem reads is an enumerator here, mapped to its on-disk
// string in exactly one table (gguf_keys.cpp). Keys written "{arch}.x" are prefixed with the
// model's architecture ("llama.block_count"). Thread-safe (constants only).
#pragma once

#include <string>
#include <string_view>

namespace kvmem::gguf {

enum class Key {
  // general.*
  kGeneralArchitecture,
  kGeneralAlignment,
  kGeneralName,
  kGeneralFileType,
  kGeneralQuantizationVersion,
  // {arch}.* hyper-parameters
  kVocabSize,
  kContextLength,
  kEmbeddingLength,
  kBlockCount,
  kFeedForwardLength,
  kExpertCount,
  kExpertUsedCount,
  kExpertFeedForwardLength,
  kHeadCount,
  kHeadCountKv,
  kKeyLength,
  kValueLength,
  kLayerNormEps,
  kLayerNormRmsEps,
  kSlidingWindow,
  kRopeDimensionCount,
  kRopeFreqBase,
  kRopeFreqBaseSwa,
  kRopeScalingType,
  kRopeScalingFactor,
  kRopeScalingOrigContextLength,
  kRopeScalingAttnFactor,
  kRopeScalingFinetuned,
  kAttnLogitSoftcapping,
  kFinalLogitSoftcapping,
  // tokenizer.*
  kTokenizerModel,
  kTokenizerPre,
  kTokenizerTokens,
  kTokenizerScores,
  kTokenizerTokenType,
  kTokenizerMerges,
  kTokenizerBosId,
  kTokenizerEosId,
  kTokenizerEotId,
  kTokenizerEomId,
  kTokenizerUnknownId,
  kTokenizerPaddingId,
  kTokenizerSepId,
  kTokenizerAddBos,
  kTokenizerAddEos,
  kTokenizerAddSpacePrefix,
  kTokenizerChatTemplate,

  kCount,  // not a key
};

inline constexpr int kNumKeys = static_cast<int>(Key::kCount);

// The key as written in the table, e.g. "{arch}.block_count" or "general.alignment".
std::string_view KeyPattern(Key key);

// True for keys written "{arch}.…".
bool KeyIsArchPrefixed(Key key);

// The on-disk key string: "{arch}" replaced by `arch` for arch-prefixed keys (left as the literal
// pattern when `arch` is empty, so that lookups fail with a readable name); `arch` is ignored
// otherwise.
std::string KeyName(Key key, std::string_view arch);

}  // namespace kvmem::gguf
