// The memart policy's presets (memory/retrieval/memart_presets.h): "auto" takes the model's
// preset when one ships or was calibrated, else the paper's per-layer retrieval; "model" without
// one is refused; a calibrated file overrides the shipped one and a damaged one is an error, not
// ignored; fields given in a config win over the preset's.
#include <gtest/gtest.h>

#include <fstream>

#include "memory/policy/policy_table.h"
#include "memory/retrieval/memart_presets.h"
#include "test_util.h"

namespace kvmem::memory {
namespace {

const std::string kSmolLM2 = "1dff70ef9e211d0ab8951aa641e75aa1";  // its GGUF's fingerprint
const std::string kOther = std::string(32, 'f');

PolicyEnv Env(const std::string& presets_dir, const std::string& fingerprint) {
  PolicyEnv env;
  env.presets_dir = presets_dir;
  env.model_fingerprint = fingerprint;
  return env;
}

TEST(MemArtPresetTest, AutoTakesTheModelsPresetElseThePapers) {
  auto shipped = ParseMemorySpec(Env("", kSmolLM2), "memart", Json::object());
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  EXPECT_EQ(shipped->config["preset"], "model");
  EXPECT_EQ(shipped->config["heads"], (Json{"15.6", "18.6", "12.8", "5.2", "14.3"}));
  EXPECT_EQ(shipped->config["strategy"], "softmax-max-exact");
  EXPECT_EQ(shipped->config["top_k"], 64);
  EXPECT_EQ(shipped->config["neighbors"], 2);
  auto overridden = ParseMemorySpec(Env("", kSmolLM2), "memart", {{"top_k", 128}});
  ASSERT_TRUE(overridden.ok());
  EXPECT_EQ(overridden->config["top_k"], 128);
  EXPECT_EQ(overridden->config["heads"], shipped->config["heads"]);

  auto paper = ParseMemorySpec(Env("", kOther), "memart", Json::object());
  ASSERT_TRUE(paper.ok());
  EXPECT_EQ(paper->config["preset"], "paper");
  EXPECT_EQ(paper->config["heads"], Json::array());
  EXPECT_EQ(paper->config["strategy"], "softmax-sum");
  auto none = ParseMemorySpec(Env("", kOther), "memart", {{"preset", "model"}});
  EXPECT_EQ(none.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("kvmem calibrate memart"), std::string::npos);
  // The paper's preset ignores the model's.
  auto forced = ParseMemorySpec(Env("", kSmolLM2), "memart", {{"preset", "paper"}});
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->config["heads"], Json::array());
  // A parsed config parses to itself (what a manifest stores is read back the same).
  auto again = ParseMemorySpec(Env("", kSmolLM2), "memart", shipped->config);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->config, shipped->config);
}

TEST(MemArtPresetTest, CalibratedPresetsAreFoundAndCheckedNeverIgnored) {
  store::testing::TempDir dir;
  const std::string presets = dir.path() + "/presets";
  const Json fields = {{"block_size", 16}, {"top_k", 32}, {"strategy", "rr-max-exact"},
                       {"neighbors", 1}, {"heads", {"3.1", "2.0"}}};
  ASSERT_TRUE(WriteCalibratedPreset(presets, kOther, fields).ok());
  auto found = FindMemArtPreset(presets, kOther);
  ASSERT_TRUE(found.ok() && *found);
  EXPECT_EQ((*found)->fields, fields);
  EXPECT_EQ((*found)->source, CalibratedPresetPath(presets, kOther));
  auto spec = ParseMemorySpec(Env(presets, kOther), "memart", Json::object());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->config["preset"], "model");
  EXPECT_EQ(spec->config["heads"], fields["heads"]);
  EXPECT_EQ(spec->config["strategy"], "rr-max-exact");

  std::ofstream(CalibratedPresetPath(presets, kOther)) << "{\"top_k\": ";
  EXPECT_EQ(ParseMemorySpec(Env(presets, kOther), "memart", Json::object()).status().code(),
            ErrorCode::kCorrupt);
  std::ofstream(CalibratedPresetPath(presets, kOther)) << R"({"top_k": 8, "budget": 3})";
  auto bad = ParseMemorySpec(Env(presets, kOther), "memart", Json::object());
  EXPECT_EQ(bad.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("budget"), std::string::npos);
  std::ofstream(CalibratedPresetPath(presets, kOther)) << R"({"top_k": 0})";
  EXPECT_EQ(ParseMemorySpec(Env(presets, kOther), "memart", Json::object()).status().code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvmem::memory
