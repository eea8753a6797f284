#include <gtest/gtest.h>

#include "model/model.h"
#include "tiny_model.h"

namespace kvmem::model {
namespace {

using testing::BuildTinyGguf;
using testing::TempFile;
using testing::TinyConfig;

Result<std::unique_ptr<Model>> LoadTiny(const TinyConfig& c) {
  TempFile f(BuildTinyGguf(c));
  return Model::Load(f.path());
}

TEST(ModelLoad, ReadsGeometryPerArchitecture) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    TinyConfig c;
    c.arch = arch;
    c.head_dim = 16;  // differs from n_embd / n_heads = 8
    auto m = LoadTiny(c);
    ASSERT_TRUE(m.ok()) << arch << ": " << m.status().ToString();
    const ModelSpec& s = (*m)->spec();
    EXPECT_EQ(s.arch_name, arch);
    EXPECT_EQ(s.n_layers, 2);
    EXPECT_EQ(s.head_dim_k, 16);
    EXPECT_EQ(s.n_vocab, 64);
    EXPECT_EQ(s.qkv_bias, std::string(arch) == "qwen2");
    EXPECT_EQ(s.qk_norm, std::string(arch) == "qwen3");
    EXPECT_EQ(s.rope_mode == kernels::RopeMode::kNeox, std::string(arch) != "llama");
    EXPECT_TRUE(s.tied_output);
  }
}

TEST(ModelLoad, UntiedOutputIsItsOwnMatrix) {
  TinyConfig c;
  c.tied = false;
  auto m = LoadTiny(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE((*m)->spec().tied_output);
  EXPECT_NE((*m)->weights().output.data, (*m)->weights().tok_embd.data);
}

struct BadCase {
  const char* name;
  TinyConfig config;
  ErrorCode code;
  const char* needle;
};

TEST(ModelLoad, BadModelsNameTheProblem) {
  std::vector<BadCase> cases;
  {
    TinyConfig c;
    c.skip_tensor = "blk.1.ffn_up.weight";
    cases.push_back({"missing tensor", c, ErrorCode::kNotFound, "blk.1.ffn_up.weight"});
  }
  {
    TinyConfig c;
    c.reshape_tensor = "blk.0.attn_k.weight";
    cases.push_back({"wrong shape", c, ErrorCode::kCorrupt, "blk.0.attn_k.weight"});
  }
  {
    TinyConfig c;
    c.arch = "qwen2";
    c.skip_tensor = "blk.0.attn_v.bias";
    cases.push_back({"qwen2 without bias", c, ErrorCode::kNotFound, "blk.0.attn_v.bias"});
  }
  {
    TinyConfig c;
    c.n_kv_heads = 3;
    cases.push_back({"heads not a multiple", c, ErrorCode::kCorrupt, "head_count_kv"});
  }
  {
    TinyConfig c;
    c.arch = "mamba";
    cases.push_back({"unknown architecture", c, ErrorCode::kUnsupported, "mamba"});
  }
  for (const BadCase& bc : cases) {
    auto m = LoadTiny(bc.config);
    ASSERT_FALSE(m.ok()) << bc.name;
    EXPECT_EQ(m.status().code(), bc.code) << bc.name << ": " << m.status().ToString();
    EXPECT_NE(m.status().message().find(bc.needle), std::string::npos)
        << bc.name << ": " << m.status().ToString();
  }
}

TEST(ModelLoad, MissingFileIsAnIoError) {
  auto m = Model::Load("/nonexistent/model.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kIo);
}

}  // namespace
}  // namespace kvmem::model
