// Helpers of the sentence-encoder tests: where the goldens (tests/data/embed/, written by
// scripts/make_embed_goldens.py) and the installed MiniLM model live, JSON and f32 readers, and
// a temporary copy of a model directory to damage. Header-only.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../test_util.h"
#include "memory/embed/sentence_encoder.h"

namespace kvmem::memory::embed::testing {

inline std::string DataDir() { return std::string(KVMEM_TESTDATA_DIR) + "/embed"; }
inline std::string TinyModelDir() { return DataDir() + "/tiny"; }

// $KVMEM_HOME/models/all-MiniLM-L6-v2 (scripts/install_deps.sh --model minilm).
inline std::filesystem::path MiniLmDir() {
  if (const char* kh = std::getenv("KVMEM_HOME"); kh != nullptr && *kh != '\0') {
    return std::filesystem::path(kh) / "models/all-MiniLM-L6-v2";
  }
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home ? home : "") / ".cache/kvmem/models/all-MiniLM-L6-v2";
}

// The installed MiniLM, loaded once; nullptr when it is not installed.
inline const SentenceEncoder* MiniLm() {
  static const std::unique_ptr<SentenceEncoder> encoder = []() -> std::unique_ptr<SentenceEncoder> {
    if (!std::filesystem::exists(MiniLmDir() / "model.safetensors")) return nullptr;
    auto e = SentenceEncoder::Load(MiniLmDir().string());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (!e.ok()) return nullptr;
    return std::make_unique<SentenceEncoder>(std::move(e).value());
  }();
  return encoder.get();
}

#define KVMEM_REQUIRE_MINILM(enc)                                                                 \
  const ::kvmem::memory::embed::SentenceEncoder* enc = ::kvmem::memory::embed::testing::MiniLm(); \
  if (enc == nullptr) {                                                                           \
    GTEST_SKIP() << ::kvmem::memory::embed::testing::MiniLmDir() << " not present (run "          \
                 << "scripts/install_deps.sh --model minilm)";                                    \
  }

inline nlohmann::json LoadJson(const std::string& name) {
  const std::string path = DataDir() + "/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  if (!in.good()) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

inline std::vector<float> LoadF32(const std::string& name) {
  std::ifstream in(DataDir() + "/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << name;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

inline double Cosine(const float* a, const float* b, int n) {
  double ab = 0, aa = 0, bb = 0;
  for (int i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// A copy of a model directory in a fresh temporary directory, removed at scope exit.
class ModelCopy : public store::testing::TempDir {
 public:
  explicit ModelCopy(const std::string& src) {
    std::filesystem::copy(src, path(), std::filesystem::copy_options::recursive);
  }
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

}  // namespace kvmem::memory::embed::testing
