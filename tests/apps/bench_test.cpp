// `kvmem bench`'s pure parts (eval/bench_runner.h): test names, option lists, the summary of
// repetitions, and the FLOPs/bytes accounting against figures worked out by hand for a small
// made-up model with one sliding-window layer. No model file, no timing.
#include "eval/bench_runner.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvmem::eval {
namespace {

using Kind = BenchTest::Kind;

// 2 layers (layer 0 local with a window of 4 rows, layer 1 global), d = 64, 4 query heads and
// 2 KV heads of 32, FFN 128, vocabulary 100, trained on 1024 positions.
model::ModelSpec TinySpec() {
  model::ModelSpec s;
  s.n_layers = 2;
  s.n_embd = 64;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim_k = 32;
  s.head_dim_v = 32;
  s.n_ff = 128;
  s.n_vocab = 100;
  s.n_ctx_train = 1024;
  s.layers = {{.sliding_window = 4}, {.sliding_window = 0}};
  return s;
}

TEST(BenchTestName, ParsesLlamaBenchNames) {
  const std::vector<std::pair<std::string, BenchTest>> cases = {
      {"pp512", {Kind::kPrompt, 512, 0}},
      {"tg128", {Kind::kGenerate, 128, 0}},
      {"tg128@d4096", {Kind::kGenerate, 128, 4096}},
      {"pp64@d100", {Kind::kPrompt, 64, 100}},
      {"tg1", {Kind::kGenerate, 1, 0}},
      {"pp16777216", {Kind::kPrompt, 16777216, 0}},
  };
  for (const auto& [name, want] : cases) {
    auto t = ParseBenchTest(name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    EXPECT_EQ(*t, want) << name;
    EXPECT_EQ(t->name(), name);
  }
}

TEST(BenchTestName, RejectsEverythingElseNamingIt) {
  for (const std::string bad :
       {"",           "pp",         "tg",         "tg0",           "pp-5",
        "pp+5",       "pp012",      "pp 128",     "PP128",         "xx128",
        "tg128@",     "tg128@d",    "tg128@4096", "tg128@d0",      "tg128@d01",
        "tg128d1024", "tg128@d10x", "pp16777217", "pp99999999999", "tg12.5"}) {
    auto t = ParseBenchTest(bad);
    ASSERT_FALSE(t.ok()) << "'" << bad << "' parsed";
    EXPECT_EQ(t.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("'" + bad + "'"), std::string::npos)
        << t.status().message();
  }
}

TEST(BenchTestName, ParsesLists) {
  auto l = ParseBenchTests("pp128,tg32,tg32@d1024");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const std::vector<BenchTest> want = {
      {Kind::kPrompt, 128, 0}, {Kind::kGenerate, 32, 0}, {Kind::kGenerate, 32, 1024}};
  EXPECT_EQ(*l, want);
  EXPECT_FALSE(ParseBenchTests("").ok());
  EXPECT_FALSE(ParseBenchTests("pp128,,tg32").ok());
  EXPECT_FALSE(ParseBenchTests("pp128,").ok());
  EXPECT_FALSE(ParseBenchTests("pp128,tg").ok());
}

TEST(BenchTestName, DefaultsStopAtTheTrainingContext) {
  model::ModelSpec s = TinySpec();
  auto names = [&] {
    std::string out;
    for (const BenchTest& t : DefaultBenchTests(s)) out += t.name() + ",";
    return out;
  };
  s.n_ctx_train = 8192;  // SmolLM2
  EXPECT_EQ(names(), "pp128,pp512,pp2048,tg128,tg128@d1024,tg128@d4096,tg128@d8192,");
  s.n_ctx_train = 32768;
  EXPECT_EQ(names(), "pp128,pp512,pp2048,tg128,tg128@d1024,tg128@d4096,tg128@d16384,");
}

TEST(BenchTestName, TrainingContextFlagsAndRefusesPast4x) {
  const model::ModelSpec s = TinySpec();                                // 1024 positions
  EXPECT_FALSE(BeyondTrainingContext({Kind::kGenerate, 128, 896}, s));  // exactly 1024
  EXPECT_TRUE(BeyondTrainingContext({Kind::kGenerate, 128, 1024}, s));
  EXPECT_TRUE(CheckBenchTests({{Kind::kGenerate, 1, 4095}, {Kind::kPrompt, 4096, 0}}, s).ok());
  const Status st = CheckBenchTests({{Kind::kPrompt, 8, 0}, {Kind::kGenerate, 1, 4096}}, s);
  EXPECT_EQ(st.code(), ErrorCode::kOutOfRange);
  EXPECT_NE(st.message().find("tg1@d4096"), std::string::npos) << st.message();
}

TEST(BenchOptions, ThreadListsAndCounts) {
  auto t = ParseThreadCounts("1,2,16");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, (std::vector<int>{1, 2, 16}));
  for (const char* bad : {"", "0", "-1", "a", "1,", ",1", "2,x", "1.5", "1 ,2", "1025"}) {
    EXPECT_EQ(ParseThreadCounts(bad).status().code(), ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParsePositiveInt("5", "--reps", 1000).value(), 5);
  EXPECT_EQ(ParsePositiveInt("1000", "--reps", 1000).value(), 1000);
  for (const char* bad : {"", "0", "-3", "1001", "5x", "abc"}) {
    EXPECT_FALSE(ParsePositiveInt(bad, "--reps", 1000).ok()) << bad;
  }
}

TEST(BenchStats, MedianMinMax) {
  const RepStats odd = Summarize({30, 10, 20});
  EXPECT_EQ(odd.median, 20);
  EXPECT_EQ(odd.min, 10);
  EXPECT_EQ(odd.max, 30);
  const RepStats even = Summarize({4, 1, 3, 2});
  EXPECT_EQ(even.median, 2.5);
  EXPECT_EQ(even.min, 1);
  EXPECT_EQ(even.max, 4);
  const RepStats one = Summarize({7});
  EXPECT_EQ(one.median, 7);
  EXPECT_EQ(one.min, 7);
  EXPECT_EQ(one.max, 7);
  EXPECT_EQ(Summarize({}).median, 0);
}

TEST(BenchAccounting, VisibleRowsOfGlobalAndWindowedLayers) {
  // Positions 0..7 read 1..8 rows globally (mean 4.5) and 1,2,3,4,4,4,4,4 in a window of 4.
  EXPECT_DOUBLE_EQ(MeanVisibleRows(0, 0, 8), 4.5);
  EXPECT_DOUBLE_EQ(MeanVisibleRows(4, 0, 8), 26.0 / 8);
  // Positions 10, 11: 11 and 12 rows, or 4 and 4.
  EXPECT_DOUBLE_EQ(MeanVisibleRows(0, 10, 2), 11.5);
  EXPECT_DOUBLE_EQ(MeanVisibleRows(4, 10, 2), 4.0);
  // Positions 2..5 in a window of 4: 3, 4, 4, 4.
  EXPECT_DOUBLE_EQ(MeanVisibleRows(4, 2, 4), 3.75);
  EXPECT_DOUBLE_EQ(MeanVisibleRows(4, 2, 0), 0.0);
}

TEST(BenchAccounting, FlopsPerToken) {
  const model::ModelSpec s = TinySpec();
  // Q, K, V: 64 x (128 + 64 + 64); O: 128 x 64; gate, up, down: 3 x 64 x 128.
  EXPECT_EQ(LinearParamsPerLayer(s), 16384 + 8192 + 24576);
  const double linear = 2.0 * 2 * 49152;       // 196608
  const double per_row = 2.0 * 4 * (32 + 32);  // 512: q.k and the V sum, 4 heads
  // pp8: the LM head (2 x 100 x 64) once over 8 tokens; rows 26/8 (local) + 36/8 (global).
  EXPECT_DOUBLE_EQ(FlopsPerToken(s, 0, 8, 1), linear + 12800.0 / 8 + per_row * (3.25 + 4.5));
  EXPECT_DOUBLE_EQ(FlopsPerToken(s, 0, 8, 1), 202176.0);
  // tg2@d10: the LM head every token; rows 4 (local) + 11.5 (global).
  EXPECT_DOUBLE_EQ(FlopsPerToken(s, 10, 2, 2), linear + 12800.0 + per_row * 15.5);
  EXPECT_DOUBLE_EQ(FlopsPerToken(s, 10, 2, 2), 217344.0);
}

TEST(BenchAccounting, DecodeBytesPerToken) {
  EXPECT_EQ(DecodeWeightBytes(1000, 300, /*tied_output=*/true), 1000u);
  EXPECT_EQ(DecodeWeightBytes(1000, 300, /*tied_output=*/false), 700u);
  // Tied, the 300-byte table packed as the LM head into 330 bytes, and 500 bytes of layers
  // packed into 600: 200 + 330 + 600.
  EXPECT_EQ(DecodeWeightBytes(1000, 300, /*tied_output=*/true, 800, 930), 1130u);
  // Untied: the table is not read; 500 bytes of layers packed into 600.
  EXPECT_EQ(DecodeWeightBytes(1000, 300, /*tied_output=*/false, 500, 600), 800u);

  const model::ModelSpec s = TinySpec();
  // f16: a row of one KV head is 32 x 2 bytes of K and of V; 2 heads: 256 bytes per layer row.
  // tg2@d10 reads 4 (local) + 11.5 (global) rows per token.
  EXPECT_DOUBLE_EQ(KvBytesPerToken(s, {}, 10, 2), 256.0 * 15.5);
  // q8_0 K (a block of 32: f16 scale + 32 int8 = 34 bytes), q4_0 V (f16 scale + 16 bytes of
  // nibbles = 18): 2 x (34 + 18) = 104 bytes per layer row.
  const kv::KvFormats quant{kv::KvFormat::kQ8_0, kv::KvFormat::kQ4_0};
  EXPECT_DOUBLE_EQ(KvBytesPerToken(s, quant, 10, 2), 104.0 * 15.5);
  // tg4@d2: 3.75 (local) + 4.5 (global) rows.
  EXPECT_DOUBLE_EQ(KvBytesPerToken(s, quant, 2, 4), 104.0 * 8.25);
  // kivi4 K: a group of 32 rows is 32 f16 scales + 32 f16 mins + 32 rows x 16 bytes of codes =
  // 640 bytes, 20 per row; f16 V 64: 2 x (20 + 64) = 168 bytes per layer row.
  const kv::KvFormats kivi{kv::KvFormat::kKivi4, kv::KvFormat::kF16};
  EXPECT_DOUBLE_EQ(KvBytesPerToken(s, kivi, 10, 2), 168.0 * 15.5);
}

TEST(BenchAccounting, RowsSetAgainstTheirRoofline) {
  BenchRow pp;
  pp.test = {Kind::kPrompt, 512, 0};
  pp.tokens_per_second = {10, 9, 11};
  pp.work_per_token = 1e9;  // FLOPs
  pp.roofline = {.threads = 1, .bandwidth_gbps = 20, .fma_peak_gflops = 40};
  EXPECT_DOUBLE_EQ(pp.achieved(), 10.0);
  EXPECT_DOUBLE_EQ(pp.roofline_fraction(), 0.25);
  BenchRow tg = pp;
  tg.test = {Kind::kGenerate, 128, 0};
  tg.tokens_per_second = {50, 40, 60};
  tg.work_per_token = 2e8;  // bytes
  EXPECT_DOUBLE_EQ(tg.achieved(), 10.0);
  EXPECT_DOUBLE_EQ(tg.roofline_fraction(), 0.5);
}

}  // namespace
}  // namespace kvmem::eval
