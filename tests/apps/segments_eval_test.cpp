// The segments harness (eval/segments_eval.h) on a tiny random model with a byte tokenizer:
// worlds are read or refused with the line named; full recomputation is its own reference;
// prefix caching and every method that recomputes all of its segments (ratio 1) answer exactly
// as full recomputation at every step, while full reuse does not; what each method prefills
// follows from the updates, counted by hand.
#include "eval/segments_eval.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "../model/tiny_model.h"
#include "../tokenizer/byte_tokenizer.h"

namespace kvmem::eval {
namespace {

std::string WriteWorlds(const std::string& text) {
  char path[] = "/tmp/kvmem_worlds_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

const char* kWorld =
    R"({"id": "w", "system": "Plan.", "segments": [{"name": "a", "text": "The key is in the box."},)"
    R"( {"name": "b", "text": "The box is on the desk."}, {"name": "c", "text": "The desk is in the study."}],)"
    R"( "steps": [{"updates": [], "query": "Where is the key?", "answer": "the study", "needs": ["a", "b", "c"]},)"
    R"( {"updates": [{"name": "b", "text": "The box is on the bed."}], "query": "Where is the box?", "answer": "the bed", "needs": ["b"]},)"
    R"( {"updates": [{"name": "d", "text": "Task 1 done."}, {"name": "a", "delete": true}], "query": "Tasks?", "answer": "one", "needs": ["d"]}]})"
    "\n";

TEST(SegmentsEval, WorldsAreReadAndBadLinesNamed) {
  const std::string path = WriteWorlds(std::string(kWorld) + "\n");
  auto w = ReadTextWorlds(path);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->size(), 1u);
  EXPECT_EQ((*w)[0].segments.size(), 3u);
  ASSERT_EQ((*w)[0].steps.size(), 3u);
  EXPECT_TRUE((*w)[0].steps[2].updates[1].remove);
  EXPECT_EQ((*w)[0].steps[0].needs.size(), 3u);
  std::remove(path.c_str());

  const std::string bad =
      WriteWorlds(std::string(kWorld) +
                  R"({"id": "x", "system": "s", "segments": [], "steps": [{"updates": []}]})"
                  "\n");
  auto r = ReadTextWorlds(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(":2: 'query'"), std::string::npos) << r.status().ToString();
  std::remove(bad.c_str());
  EXPECT_FALSE(ReadTextWorlds("/nonexistent/worlds.jsonl").ok());
}

TEST(SegmentsEval, RecomputingEverythingMatchesFullRecomputation) {
  model::testing::TinyConfig c;
  c.n_vocab = 258;
  c.n_layers = 3;
  model::testing::TempFile file(model::testing::BuildTinyGguf(c, 5));
  auto model = model::Model::Load(file.path());
  ASSERT_TRUE(model.ok());
  const tokenizer::Tokenizer tok = tokenizer::testing::ByteTokenizer();
  const std::string path = WriteWorlds(kWorld);
  auto worlds = ReadTextWorlds(path);
  std::remove(path.c_str());
  ASSERT_TRUE(worlds.ok());
  ThreadPool threads(2);
  SegmentsEvalOptions o;
  o.methods = {"full", "prefix", "reuse", "cacheblend", "keep-nosd"};
  o.ratio = 1.0;
  o.chunk_tokens = 40;
  std::map<std::string, std::vector<nlohmann::ordered_json>> rows;
  Status st = RunSegmentsEval(
      **model, tok, tokenizer::ChatTemplateFor(tokenizer::ChatTemplateKind::kChatMl), nullptr,
      &threads, *worlds, o,
      [&](const nlohmann::ordered_json& r) { rows[r["method"]].push_back(r); });
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (const auto& [m, rs] : rows) ASSERT_EQ(rs.size(), 3u) << m;
  for (int step = 0; step < 3; ++step) {
    for (const char* m : {"full", "prefix", "cacheblend", "keep-nosd"}) {
      const auto& r = rows[m][step];
      EXPECT_LT(r["kl"].get<double>(), 1e-6) << m << " step " << step;
      EXPECT_TRUE(r["agree"].get<bool>()) << m << " step " << step;
      EXPECT_NEAR(r["nll"].get<double>(), rows["full"][step]["nll"].get<double>(), 1e-3) << m;
    }
  }
  // Full reuse misses the attention between segments.
  EXPECT_GT(rows["reuse"][0]["kl"].get<double>(), 1e-6);
  // Prefilled, by hand (a byte is a token). Step 1 rewrote b: full reuse prefills b and the
  // query, so the query's size is what is left.
  const double a_len = std::string("The key is in the box.\n").size();
  const double b1_len = std::string("The box is on the bed.\n").size();
  const double d_len = std::string("Task 1 done.\n").size();
  const double query1 = rows["reuse"][1]["prefilled"].get<double>() - b1_len;
  ASSERT_GT(query1, 0);
  // Prefix caching reuses the prefix, a and "The box is on the " (the old b said "desk").
  const double common = std::string("The box is on the ").size();
  EXPECT_DOUBLE_EQ(rows["prefix"][1]["prefilled"].get<double>(),
                   rows["prefix"][1]["memory_tokens"].get<double>() + query1 - a_len - common);
  // Step 2 added d and removed a: full reuse prefills d and the new query.
  const double query2 =
      query1 - std::string("Where is the box?").size() + std::string("Tasks?").size();
  EXPECT_DOUBLE_EQ(rows["reuse"][2]["prefilled"].get<double>(), d_len + query2);
  // Full recomputation prefills everything: two steps differ by what changed.
  EXPECT_DOUBLE_EQ(
      rows["full"][2]["prefilled"].get<double>() - rows["full"][1]["prefilled"].get<double>(),
      d_len - a_len + query2 - query1);
}

}  // namespace
}  // namespace kvmem::eval
