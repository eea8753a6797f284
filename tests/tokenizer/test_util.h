// Shared helpers for the tokenizer tests: golden-vector JSON files and the real SmolLM2 and
// Gemma-3 tokenizers (loaded once through the gguf layer; nullptr when the model is not on this
// machine).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "gguf/gguf_file.h"
#include "tokenizer/gguf_config.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::tokenizer::testing {

// Printable ASCII as is, every other byte as \xNN, for readable failure messages.
inline std::string Escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

inline nlohmann::json LoadVectors(const std::string& name) {
  const std::string path = std::string(KVMEM_TESTDATA_DIR) + "/tokenizer/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  if (!in.good()) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

inline std::filesystem::path SmolLm2Path() {
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home ? home : "") /
         ".cache/kvmem/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The SmolLM2 tokenizer, or nullptr when the model file is absent.
inline const Tokenizer* SmolLm2() {
  static const std::unique_ptr<Tokenizer> tokenizer = []() -> std::unique_ptr<Tokenizer> {
    if (!std::filesystem::exists(SmolLm2Path())) return nullptr;
    auto file = gguf::GgufFile::Open(SmolLm2Path().string());
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    if (!file.ok()) return nullptr;
    auto t = LoadTokenizer(*file);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return nullptr;
    return std::make_unique<Tokenizer>(std::move(t).value());
  }();
  return tokenizer.get();
}

// A tokenizer from the SmolLM2 GGUF with its pre-tokenizer replaced; nullptr without the model.
inline std::unique_ptr<Tokenizer> SmolLm2WithPre(const std::string& pre) {
  if (!std::filesystem::exists(SmolLm2Path())) return nullptr;
  auto file = gguf::GgufFile::Open(SmolLm2Path().string());
  if (!file.ok()) return nullptr;
  auto config = TokenizerConfigFromGguf(*file);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  if (!config.ok()) return nullptr;
  config->pre = pre;
  auto t = Tokenizer::Create(std::move(config).value());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return nullptr;
  return std::make_unique<Tokenizer>(std::move(t).value());
}

inline std::filesystem::path Gemma3Path() {
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home ? home : "") / ".cache/kvmem/models/gemma-3-270m-q4_k_m.gguf";
}

// The Gemma-3 tokenizer (262,144 pieces), or nullptr when the optional model is not installed.
inline const Tokenizer* Gemma3() {
  static const std::unique_ptr<Tokenizer> tokenizer = []() -> std::unique_ptr<Tokenizer> {
    if (!std::filesystem::exists(Gemma3Path())) return nullptr;
    auto file = gguf::GgufFile::Open(Gemma3Path().string());
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    if (!file.ok()) return nullptr;
    auto t = LoadTokenizer(*file);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return nullptr;
    return std::make_unique<Tokenizer>(std::move(t).value());
  }();
  return tokenizer.get();
}

#define KVMEM_REQUIRE_GEMMA3(tok)                                                     \
  const ::kvmem::tokenizer::Tokenizer* tok = ::kvmem::tokenizer::testing::Gemma3();   \
  if (tok == nullptr) {                                                               \
    GTEST_SKIP() << ::kvmem::tokenizer::testing::Gemma3Path() << " not present (run " \
                 << "scripts/install_deps.sh --model gemma3-270m)";                   \
  }

#define KVMEM_REQUIRE_SMOLLM2(tok)                                                     \
  const ::kvmem::tokenizer::Tokenizer* tok = ::kvmem::tokenizer::testing::SmolLm2();   \
  if (tok == nullptr) {                                                                \
    GTEST_SKIP() << ::kvmem::tokenizer::testing::SmolLm2Path() << " not present (run " \
                 << "scripts/install_deps.sh)";                                        \
  }

}  // namespace kvmem::tokenizer::testing
