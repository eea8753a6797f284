// OpenAI's POST /v1/embeddings over the server's sentence encoder (memory/embed: all-MiniLM-L6-v2
// unless --embed-model names another), as the official `openai` client sends and reads it:
//
//   {"input": TEXT | [TEXT, ...], "model": any, "encoding_format": "float" | "base64",
//    "dimensions": the encoder's own only, "user": ignored}
//   -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}],
//       "model": the encoder's name, "usage": {"prompt_tokens": N, "total_tokens": N}}
//
// The vectors are sentence-transformers' (unit length, mean-pooled; a text past the encoder's
// max_seq_length is cut there, as sentence-transformers cuts it, not refused); "base64" is the
// little-endian float32 bytes, which the `openai` client asks for and decodes by default.
// Token-id inputs are Unsupported. Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/api_types.h"

namespace kvmem::serve {

// OpenAI's limit on inputs per request.
inline constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingsRequest {
  std::vector<std::string> texts = {};
  bool base64 = false;
  std::optional<int64_t> dimensions = {};
};

Result<EmbeddingsRequest> ParseEmbeddingsRequest(std::string_view body);

// InvalidArgument naming "model" when the server has no encoder, "dimensions" when they differ
// from the encoder's.
Status CheckEmbeddingsModel(const EmbeddingsRequest& request, const ModelInfo& model);

std::string EmbeddingsJson(const Embeddings& result, const ModelInfo& model, bool base64);

}  // namespace kvmem::serve
