#include "serve/embeddings_api.h"

#include <bit>
#include <cstring>

#include "core/base64.h"
#include "serve/json_body.h"

namespace kvmem::serve {
namespace {

static_assert(std::endian::native == std::endian::little,
              "base64 embeddings are little-endian float32, copied as they lie in memory");

std::string Base64Floats(const float* v, int n) {
  std::string bytes(static_cast<size_t>(n) * sizeof(float), '\0');
  std::memcpy(bytes.data(), v, bytes.size());
  return Base64Encode(bytes);
}

}  // namespace

Result<EmbeddingsRequest> ParseEmbeddingsRequest(std::string_view body_text) {
  KVMEM_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  EmbeddingsRequest r;
  const Json* input = FindField(body, "input");
  if (input == nullptr) return FieldError("input", "required");
  if (input->is_string()) {
    r.texts.push_back(input->get<std::string>());
  } else if (input->is_array()) {
    if (input->empty()) return FieldError("input", "must not be empty");
    if (input->size() > kMaxEmbeddingInputs) {
      return FieldError("input", "holds " + std::to_string(input->size()) + " items; at most " +
                                     std::to_string(kMaxEmbeddingInputs) + " are allowed");
    }
    for (size_t i = 0; i < input->size(); ++i) {
      const Json& t = (*input)[i];
      if (t.is_number_integer() || t.is_array()) {
        return Status(ErrorCode::kUnsupported,
                      "'input': token ids are not supported; send text (kvmem's encoder has its "
                      "own tokenizer)");
      }
      if (!t.is_string()) return TypeError("input[" + std::to_string(i) + "]", "a string", t);
      r.texts.push_back(t.get<std::string>());
    }
  } else {
    return TypeError("input", "a string or an array of strings", *input);
  }
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> model, OptionalString(body, "model", "model"));
  (void)model;  // one encoder is loaded; any name is accepted, as for the chat model
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> format,
                         OptionalString(body, "encoding_format", "encoding_format"));
  if (format && *format != "float" && *format != "base64") {
    return FieldError("encoding_format", "must be \"float\" or \"base64\", got '" + *format + "'");
  }
  r.base64 = format && *format == "base64";
  KVMEM_ASSIGN_OR_RETURN(r.dimensions, OptionalInt(body, "dimensions", "dimensions"));
  return r;
}

Status CheckEmbeddingsModel(const EmbeddingsRequest& request, const ModelInfo& model) {
  if (model.embedding_dim <= 0) {
    return FieldError(
        "model",
        "this server has no embedding model: install all-MiniLM-L6-v2 "
        "(scripts/install_deps.sh --model minilm) or start it with --embed-model DIR");
  }
  if (request.dimensions && *request.dimensions != model.embedding_dim) {
    return FieldError("dimensions", "the embedding model " + model.embedding_model + " gives " +
                                        std::to_string(model.embedding_dim) + " dimensions, got " +
                                        std::to_string(*request.dimensions));
  }
  return Status::Ok();
}

std::string EmbeddingsJson(const Embeddings& result, const ModelInfo& model, bool base64) {
  const int dim = model.embedding_dim;
  const size_t n = dim > 0 ? result.vectors.size() / static_cast<size_t>(dim) : 0;
  Json data = Json::array();
  for (size_t i = 0; i < n; ++i) {
    const float* v = result.vectors.data() + i * static_cast<size_t>(dim);
    Json embedding = base64 ? Json(Base64Floats(v, dim)) : Json(std::vector<float>(v, v + dim));
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
  }
  return DumpJson({{"object", "list"},
                   {"data", std::move(data)},
                   {"model", model.embedding_model},
                   {"usage", {{"prompt_tokens", result.tokens}, {"total_tokens", result.tokens}}}});
}

}  // namespace kvmem::serve
