#include "model/math_keys.h"

#include <algorithm>
#include <string_view>

namespace kvmem::model {
namespace {

using gguf::Key;

// The family-namespace keys ReadSpec reads for every family.
constexpr Key kSharedKeys[] = {
    Key::kVocabSize,
    Key::kContextLength,
    Key::kEmbeddingLength,
    Key::kBlockCount,
    Key::kFeedForwardLength,
    Key::kHeadCount,
    Key::kHeadCountKv,
    Key::kKeyLength,
    Key::kValueLength,
    Key::kLayerNormRmsEps,
    Key::kRopeDimensionCount,
    Key::kRopeFreqBase,
    Key::kRopeScalingType,
    Key::kRopeScalingFactor,
    Key::kRopeScalingOrigContextLength,
    Key::kRopeScalingAttnFactor,
    Key::kRopeScalingFinetuned,  // inert: says how the model was trained
};

// Words of a key name that say it changes the computation.
constexpr std::string_view kMathWords[] = {
    "rope",   "attention", "attn",   "expert", "softcap", "scal",  "norm",   "logit",
    "window", "moe",       "sink",   "shared", "head",    "layer", "length", "count",
    "embed",  "residual",  "gating", "swiglu", "ssm",     "clamp", "eps",    "dim",
};

bool BearsOnMath(std::string_view suffix) {
  return std::any_of(std::begin(kMathWords), std::end(kMathWords),
                     [&](std::string_view w) { return suffix.find(w) != std::string_view::npos; });
}

}  // namespace

Status CheckNothingIgnored(const gguf::GgufFile& f, const Architecture& a,
                           const std::set<std::string>& consumed, int* ignored_tensors) {
  auto ignored = [&](std::string_view name) {
    return std::any_of(a.ignored_prefixes.begin(), a.ignored_prefixes.end(),
                       [&](std::string_view p) { return name.starts_with(p); });
  };
  *ignored_tensors = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (consumed.count(t.name) > 0) continue;
    if (ignored(t.name)) {
      ++*ignored_tensors;
    } else {
      return Unsupported("tensor '" + t.name + "' is not used by kvmem's " +
                         std::string(a.gguf_name) +
                         ": it would change the model's math, so the file is refused rather "
                         "than run as another model");
    }
  }
  std::set<std::string> read;
  for (Key k : kSharedKeys) read.insert(f.Name(k, a.gguf_name));
  for (Key k : a.family_keys) read.insert(f.Name(k, a.gguf_name));
  const std::string prefix = std::string(a.gguf_name) + ".";
  for (const gguf::KeyValue& kv : f.metadata()) {
    const std::string_view key = kv.key;
    if (!key.starts_with(prefix) || read.count(std::string(key)) > 0) continue;
    if (ignored(key.substr(prefix.size()))) continue;
    if (BearsOnMath(key.substr(prefix.size()))) {
      return Unsupported("metadata '" + std::string(key) + "' is not understood by kvmem's " +
                         std::string(a.gguf_name) +
                         ": it would change the model's math, so the file is refused rather "
                         "than run as another model");
    }
  }
  return Status::Ok();
}

}  // namespace kvmem::model
