#include "common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace kvmem::app {

std::string DefaultModelPath() {
  if (const char* m = std::getenv("KVMEM_MODEL"); m != nullptr && *m) return m;
  std::string home;
  if (const char* h = std::getenv("KVMEM_HOME"); h != nullptr && *h) {
    home = h;
  } else if (const char* u = std::getenv("HOME"); u != nullptr && *u) {
    home.assign(u);
    home.append("/.cache/kvmem");
  } else {
    home = ".";
  }
  home.append("/models/");
  home.append(kDefaultModelFile);
  return home;
}

Result<std::unique_ptr<model::Model>> LoadModel(const std::string& path) {
  const std::string p = path.empty() ? DefaultModelPath() : path;
  if (path.empty() && access(p.c_str(), R_OK) != 0) {
    return NotFound("default model " + p +
                    " is not installed; run scripts/setup.sh (or pass -m MODEL.gguf)");
  }
  return model::Model::Load(p);
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
