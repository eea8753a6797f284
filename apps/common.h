// Shared helpers of the kvmem subcommands: where the default model lives, loading with a clear
// message, parsing id lists.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::app {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// $KVMEM_HOME/models, else ~/.cache/kvmem/models.
std::string ModelsDir();
// $KVMEM_MODEL, else ModelsDir()/<default>.
std::string DefaultModelPath();
// The sentence encoder `scripts/install_deps.sh --model minilm` installs (a directory).
std::string DefaultEmbedModel();
// Loads `path` (or the default when empty), explaining how to install the default if missing.
Result<std::unique_ptr<model::Model>> LoadModel(const std::string& path);
struct ModelAndTokenizer {
  std::unique_ptr<model::Model> model;
  std::optional<tokenizer::Tokenizer> tok;
};
// LoadModel, then the tokenizer from its metadata.
Result<ModelAndTokenizer> LoadModelAndTokenizer(const std::string& path);
// OutOfRange naming the flag unless every context is in [min, the model's training context].
Status CheckContexts(const std::vector<int>& ctx, int min, const model::ModelSpec& spec);
// "1,2,3" -> {1,2,3}; InvalidArgument on anything else.
Result<std::vector<int32_t>> ParseIdList(const std::string& s);
int DefaultThreads();
// Prints "kvmem: <status>" to stderr and returns exit code 1.
int Fail(const Status& s);

}  // namespace kvmem::app
