#include "common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tokenizer/gguf_config.h"

namespace kvmem::app {

std::string ModelsDir() {
  std::string home;
  if (const char* h = std::getenv("KVMEM_HOME"); h != nullptr && *h) {
    home = h;
  } else if (const char* u = std::getenv("HOME"); u != nullptr && *u) {
    home.assign(u);
    home.append("/.cache/kvmem");
  } else {
    home = ".";
  }
  return home + "/models";
}

std::string DefaultModelPath() {
  if (const char* m = std::getenv("KVMEM_MODEL"); m != nullptr && *m) return m;
  return ModelsDir() + "/" + kDefaultModelFile;
}

std::string DefaultEmbedModel() { return ModelsDir() + "/all-MiniLM-L6-v2"; }

Result<std::unique_ptr<model::Model>> LoadModel(const std::string& path) {
  const std::string p = path.empty() ? DefaultModelPath() : path;
  if (path.empty() && access(p.c_str(), R_OK) != 0) {
    return NotFound("default model " + p +
                    " is not installed; run scripts/setup.sh (or pass -m MODEL.gguf)");
  }
  auto m = model::Model::Load(p);
  if (m.ok() && !(*m)->load_note().empty())
    std::fprintf(stderr, "kvmem: %s\n", (*m)->load_note().c_str());
  return m;
}

Result<ModelAndTokenizer> LoadModelAndTokenizer(const std::string& path) {
  ModelAndTokenizer mt;
  KVMEM_ASSIGN_OR_RETURN(mt.model, LoadModel(path));
  auto tok = tokenizer::LoadTokenizer(mt.model->file());
  if (!tok.ok()) return tok.status().WithContext("tokenizer");
  mt.tok.emplace(std::move(tok).value());
  return mt;
}

Status CheckContexts(const std::vector<int>& ctx, int min, const model::ModelSpec& spec) {
  for (int c : ctx) {
    if (c < min || c > spec.n_ctx_train) {
      return OutOfRange("--ctx " + std::to_string(c) + " outside " + std::to_string(min) + ".." +
                        std::to_string(spec.n_ctx_train) + " (the model's training context)");
    }
  }
  return Status::Ok();
}

Result<std::vector<int32_t>> ParseIdList(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string part = s.substr(i, j - i);
    char* end = nullptr;
    long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0 || v > INT32_MAX) {
      return InvalidArgument("bad token id '" + part + "' in --tokens");
    }
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  if (ids.empty()) return InvalidArgument("--tokens is empty");
  return ids;
}

int DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int Fail(const Status& s) {
  std::fprintf(stderr, "kvmem: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace kvmem::app
