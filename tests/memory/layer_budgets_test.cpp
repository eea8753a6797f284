// EpiCache's layer budgets (memory/episodic/layer_budgets.h) on tiny random models, against
// references built without the code under test: the mask written out by hand, the masked pass's
// layer-1 keys against plain causal passes over exactly the rows each token may read, Eq. 9
// recomputed from keys read back, Eq. 10 in real numbers, and the cache file edited by hand.
#include "memory/episodic/layer_budgets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../model/tiny_model.h"
#include "../tokenizer/byte_tokenizer.h"
#include "engine/forward.h"
#include "kv/kv_pool.h"
#include "test_util.h"

namespace kvmem::memory {
namespace {

using Json = nlohmann::json;

constexpr int kBlockRows = 256;  // the pool ForwardBlockMasked needs

class LayerBudgetsTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model::testing::TinyConfig c;
    c.arch = GetParam();
    c.n_layers = 3;
    c.n_vocab = 257;  // the byte tokenizer's ids
    c.sliding_window = 6;
    file_ = std::make_unique<model::testing::TempFile>(model::testing::BuildTinyGguf(c, 11));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(kBlockRows), 64);
    for (int i = 0; i < 40; ++i) tokens_.push_back((i * 37 + 11 + i * i) % 257);
  }

  // Stored keys of row r (storage index = position) of one layer: (n_kv_heads * head_dim).
  std::vector<float> Key(const kv::KvSequence& seq, int layer, int64_t r) const {
    std::vector<float> k(model_->spec().k_dim()), v(model_->spec().v_dim());
    pool_->ReadToken({seq.blocks()[r / kBlockRows], static_cast<int32_t>(r % kBlockRows)}, layer,
                     k.data(), v.data());
    return k;
  }

  // A causal pass of tokens_[rows] at positions `rows` (ascending) over a fresh sequence; the
  // keys of its last row in `layer`.
  std::vector<float> LastKeyOfSubsequence(const std::vector<int64_t>& rows, int layer) {
    kv::KvSequence seq(pool_.get());
    seq.set_window_release(false);
    engine::Batch b;
    for (int64_t j : rows) {
      b.tokens.push_back(tokens_[j]);
      b.positions.push_back(j);
    }
    engine::ForwardPass fp(*model_, &threads_);
    EXPECT_TRUE(fp.Begin(b, &seq).ok());
    while (!fp.done()) fp.StepLayer();
    return Key(seq, layer, static_cast<int64_t>(rows.size()) - 1);
  }

  // Eq. 9 recomputed in the test: the mean cosine over rows and heads of two sequences' keys.
  double Similarity(const kv::KvSequence& a, const kv::KvSequence& b, int layer) const {
    const model::ModelSpec& s = model_->spec();
    double sum = 0;
    for (int64_t r = 0; r < static_cast<int64_t>(tokens_.size()); ++r) {
      const std::vector<float> ka = Key(a, layer, r), kb = Key(b, layer, r);
      for (int h = 0; h < s.n_kv_heads; ++h) {
        double dot = 0, na = 0, nb = 0;
        for (int d = h * s.head_dim_k; d < (h + 1) * s.head_dim_k; ++d) {
          dot += double(ka[d]) * kb[d];
          na += double(ka[d]) * ka[d];
          nb += double(kb[d]) * kb[d];
        }
        sum += dot / std::sqrt(na * nb);
      }
    }
    return sum / (double(tokens_.size()) * s.n_kv_heads);
  }

  std::vector<double> Profile(const SensitivityMask& mask) {
    auto sigma = ProfileKeySimilarity(*model_, &threads_, tokens_, mask);
    EXPECT_TRUE(sigma.ok()) << sigma.status().ToString();
    return sigma.ok() ? *sigma : std::vector<double>();
  }

  std::unique_ptr<model::testing::TempFile> file_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvPool> pool_;
  ThreadPool threads_{2};
  std::vector<int32_t> tokens_;
};

INSTANTIATE_TEST_SUITE_P(Archs, LayerBudgetsTest, ::testing::Values("llama", "gemma3"));

// The mask written out by hand for n_sink 2, blocks of 4, overlap 2 (the official shape at a
// small scale), and for block 1 (a sliding window of 3 recent rows and 1 sink).
TEST(SensitivityMaskTest, ReadsTheOfficialBlockMask) {
  const SensitivityMask m{2, 4, 2};
  auto reads = [&](int64_t i) {
    std::vector<int64_t> js;
    for (int64_t j = 0; j < 16; ++j) {
      if (m.Reads(i, j)) js.push_back(j);
    }
    return js;
  };
  EXPECT_EQ(reads(0), (std::vector<int64_t>{0}));
  EXPECT_EQ(reads(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(reads(3), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(reads(4), (std::vector<int64_t>{0, 1, 2, 3, 4}));     // overlap 2, 3; sinks 0, 1
  EXPECT_EQ(reads(9), (std::vector<int64_t>{0, 1, 6, 7, 8, 9}));  // block 8..11, overlap 6, 7
  EXPECT_EQ(reads(15), (std::vector<int64_t>{0, 1, 10, 11, 12, 13, 14, 15}));
  const SensitivityMask window{1, 1, 3};
  std::vector<int64_t> js;
  for (int64_t j = 0; j < 16; ++j) {
    if (window.Reads(10, j)) js.push_back(j);
  }
  EXPECT_EQ(js, (std::vector<int64_t>{0, 7, 8, 9, 10}));
  EXPECT_FALSE((SensitivityMask{0, 0, 0}).Validate().ok());
  EXPECT_FALSE((SensitivityMask{-1, 4, 0}).Validate().ok());
  EXPECT_FALSE((SensitivityMask{0, 4, -1}).Validate().ok());
}

// (a) A mask whose first block covers every token is the causal mask: sigma is 1 everywhere.
TEST_P(LayerBudgetsTest, MaskCoveringAllTokensGivesSigmaOne) {
  for (const SensitivityMask& m : {SensitivityMask{2, 64, 0}, SensitivityMask{0, 1, 40}}) {
    const std::vector<double> sigma = Profile(m);
    ASSERT_EQ(sigma.size(), 3u);
    for (double s : sigma) EXPECT_NEAR(s, 1.0, 1e-6);
  }
}

// (b) Layer 0's keys depend only on the token and its position, so the mask cannot move them;
// deeper layers' keys move once tokens lose history. And sigma is Eq. 9 over the stored keys.
TEST_P(LayerBudgetsTest, Layer0IsUnaffectedAndDeeperLayersMove) {
  const SensitivityMask m{2, 8, 3};
  const std::vector<double> sigma = Profile(m);
  ASSERT_EQ(sigma.size(), 3u);
  EXPECT_NEAR(sigma[0], 1.0, 1e-9);
  EXPECT_LT(std::min(sigma[1], sigma[2]), 1.0 - 1e-3);

  kv::KvSequence full(pool_.get()), block(pool_.get());
  full.set_window_release(false);
  block.set_window_release(false);
  std::vector<float> logits;
  ASSERT_TRUE(engine::Forward(*model_, &threads_, &full, tokens_, 0, false, &logits).ok());
  ASSERT_TRUE(ForwardBlockMasked(*model_, &threads_, &block, tokens_, m).ok());
  for (int l = 0; l < 3; ++l) EXPECT_NEAR(sigma[l], Similarity(full, block, l), 1e-9) << l;
}

// (c) The masked pass computes exactly what the mask says: token i's layer-1 keys equal those of
// a plain causal pass over only the rows i may read (at their positions), since layer-0 K/V rows
// are the same in any pass. Checked for every token, block masks and a sliding window, and with
// micro-batches cut small, where rows of earlier batches are reached through `visible`.
TEST_P(LayerBudgetsTest, MaskedKeysMatchPassesOverTheReadableRows) {
  const SensitivityMask masks[] = {{2, 8, 3}, {0, 8, 8}, {3, 1, 5}, {1, 16, 20}};
  for (const SensitivityMask& m : masks) {
    for (int max_batch : {256, 3}) {
      SCOPED_TRACE(::testing::Message() << "mask " << m.n_sink << "/" << m.block << "/" << m.overlap
                                        << " max_batch " << max_batch);
      kv::KvSequence block(pool_.get());
      block.set_window_release(false);
      ASSERT_TRUE(ForwardBlockMasked(*model_, &threads_, &block, tokens_, m, max_batch).ok());
      for (int64_t i = 0; i < static_cast<int64_t>(tokens_.size()); ++i) {
        std::vector<int64_t> rows;
        for (int64_t j = 0; j <= i; ++j) {
          if (m.Reads(i, j)) rows.push_back(j);
        }
        const std::vector<float> want = LastKeyOfSubsequence(rows, 1);
        const std::vector<float> got = Key(block, 1, i);
        for (size_t d = 0; d < want.size(); ++d) {
          ASSERT_NEAR(got[d], want[d], 2e-3 * (1 + std::fabs(want[d]))) << "token " << i;
        }
      }
    }
  }
  // The reference tells masks apart: the causal pass differs from a masked one in layer 1.
  kv::KvSequence full(pool_.get()), block(pool_.get());
  full.set_window_release(false);
  block.set_window_release(false);
  std::vector<float> logits;
  ASSERT_TRUE(engine::Forward(*model_, &threads_, &full, tokens_, 0, false, &logits).ok());
  ASSERT_TRUE(ForwardBlockMasked(*model_, &threads_, &block, tokens_, {2, 8, 3}).ok());
  float worst = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(tokens_.size()); ++i) {
    const std::vector<float> a = Key(full, 1, i), b = Key(block, 1, i);
    for (size_t d = 0; d < a.size(); ++d) worst = std::max(worst, std::fabs(a[d] - b[d]));
  }
  EXPECT_GT(worst, 0.05f);
}

TEST_P(LayerBudgetsTest, RejectsBadInput) {
  EXPECT_FALSE(ProfileKeySimilarity(*model_, &threads_, {}, {}).ok());
  EXPECT_FALSE(ProfileKeySimilarity(*model_, &threads_, tokens_, {0, 0, 0}).ok());
  kv::KvSequence seq(pool_.get());
  ASSERT_TRUE(ForwardBlockMasked(*model_, &threads_, &seq, tokens_, {}).ok());
  EXPECT_FALSE(ForwardBlockMasked(*model_, &threads_, &seq, tokens_, {}).ok()) << "not empty";
}

// Eq. 10 in real numbers, for the eligible layers.
std::vector<double> ExactShares(const std::vector<double>& s, const std::vector<bool>& eligible,
                                double alpha, int64_t m) {
  double sum = 0;
  int n = 0;
  for (size_t l = 0; l < s.size(); ++l) {
    if (eligible[l]) sum += std::pow(s[l], alpha), ++n;
  }
  std::vector<double> out(s.size(), 0.0);
  for (size_t l = 0; l < s.size(); ++l) {
    if (eligible[l]) out[l] = std::pow(s[l], alpha) / sum * double(n) * double(m);
  }
  return out;
}

int64_t Sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// (d) Budgets sum exactly, stay within one row of Eq. 10, and ineligible layers get nothing.
TEST(AllocateLayerBudgetsTest, ProportionalAndExact) {
  const std::vector<double> s = {0.1, 0.3, 0.9, 0.6, 0.05, 0.02};
  const std::vector<bool> eligible = {true, true, false, true, true, true};
  bool flags[6] = {true, true, false, true, true, true};
  for (int64_t m : {1000, 2048, 333}) {
    const std::vector<int64_t> b = AllocateLayerBudgets(s, flags, 1.2, m);
    const std::vector<double> exact = ExactShares(s, eligible, 1.2, m);
    ASSERT_EQ(b.size(), s.size());
    EXPECT_EQ(Sum(b), 5 * m);
    EXPECT_EQ(b[2], 0);
    for (size_t l = 0; l < s.size(); ++l) EXPECT_LT(std::fabs(b[l] - exact[l]), 1.0) << l;
  }
  // Random sensitivities: exact sums, at least one row each, within a row of the share
  // wherever no layer was raised to its minimum.
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 30;
    std::vector<double> sv(n);
    bool fl[30];
    std::vector<bool> ev(n);
    int n_e = 0;
    for (int l = 0; l < n; ++l) {
      sv[l] = u(rng) * u(rng);
      ev[l] = fl[l] = u(rng) < 0.7;
      n_e += fl[l];
    }
    const int64_t m = trial % 3 == 0 ? 1 : trial % 3 == 1 ? 7 : 2048;
    const double alpha = 0.5 + u(rng);
    const std::vector<int64_t> b = AllocateLayerBudgets(sv, std::span<const bool>(fl, n), alpha, m);
    EXPECT_EQ(Sum(b), n_e * m);
    const std::vector<double> exact = n_e > 0 ? ExactShares(sv, ev, alpha, m) : sv;
    bool raised = false;
    for (int l = 0; l < n; ++l) {
      EXPECT_GE(b[l], fl[l] ? 1 : 0);
      EXPECT_LE(b[l], fl[l] ? n_e * m : 0);
      raised |= fl[l] && exact[l] < 1.0;
    }
    if (!raised) {
      for (int l = 0; l < n; ++l) EXPECT_LT(std::fabs(b[l] - exact[l]), 1.0) << trial;
    }
  }
}

TEST(AllocateLayerBudgetsTest, UniformCasesAndClamps) {
  const bool all[4] = {true, true, true, true};
  const std::vector<double> s = {0.1, 0.4, 0.2, 0.3};
  EXPECT_EQ(AllocateLayerBudgets(s, all, 0.0, 100), (std::vector<int64_t>{100, 100, 100, 100}));
  const std::vector<double> zero = {0.0, 0.0, -0.5, 0.0};
  EXPECT_EQ(AllocateLayerBudgets(zero, all, 1.2, 10), (std::vector<int64_t>{10, 10, 10, 10}));
  // Negative and NaN count as 0; a layer rounded to 0 keeps one row, from the largest budget.
  const std::vector<double> odd = {NAN, 1.0, -1.0, 1.0};
  EXPECT_EQ(AllocateLayerBudgets(odd, all, 1.0, 10), (std::vector<int64_t>{1, 19, 1, 19}));
  // Largest remainder with a tie: shares 1.5, 1.5, 3 -> the spare row goes to the lower layer.
  const bool three[3] = {true, true, true};
  const std::vector<double> tie = {1.0, 1.0, 2.0};
  EXPECT_EQ(AllocateLayerBudgets(tie, three, 1.0, 2), (std::vector<int64_t>{2, 1, 3}));
  const std::vector<double> thirds = {1.0, 1.0, 1.0, 0.0};
  const bool first3[4] = {true, true, true, false};
  EXPECT_EQ(AllocateLayerBudgets(thirds, first3, 1.0, 1), (std::vector<int64_t>{1, 1, 1, 0}));
  const std::vector<double> halves = {1.0, 1.0, 1.0, 1.0};
  const bool some[4] = {false, true, true, false};
  EXPECT_EQ(AllocateLayerBudgets(halves, some, 2.0, 5), (std::vector<int64_t>{0, 5, 5, 0}));
  const bool none[4] = {false, false, false, false};
  EXPECT_EQ(AllocateLayerBudgets(s, none, 1.0, 100), (std::vector<int64_t>(4, 0)));
  EXPECT_EQ(AllocateLayerBudgets(s, all, 1.0, 0), (std::vector<int64_t>(4, 0)));
}

// (e) The cache: profiled once, read back, a hand-edited valid file trusted, bad files replaced.
class SensitivityCacheTest : public LayerBudgetsTest {
 protected:
  void SetUp() override {
    LayerBudgetsTest::SetUp();
    text_ = dir_ / "text.txt";
    std::ofstream(text_) << "It was the best of times, it was the worst of times, it was the age "
                            "of wisdom, it was the age of foolishness, it was the epoch of belief.";
    calib_.text_path = text_;
    calib_.n_tokens = 64;
    calib_.mask = {2, 16, 8};
    cache_ = dir_ / "presets";
  }

  Result<std::vector<double>> Load(const std::string& cache_dir) {
    return LoadOrProfileSensitivity(*model_, &threads_, tok_, "00ff", cache_dir, calib_);
  }

  // 1 - sigma of the first 64 tokens, profiled directly.
  std::vector<double> Expected() {
    std::vector<int32_t> t =
        tok_.Encode(std::string(std::istreambuf_iterator<char>(std::ifstream(text_).rdbuf()), {}));
    t.resize(64);
    auto sigma = ProfileKeySimilarity(*model_, &threads_, t, calib_.mask);
    EXPECT_TRUE(sigma.ok());
    std::vector<double> s;
    for (double x : *sigma) s.push_back(std::clamp(1.0 - x, 0.0, 2.0));
    return s;
  }

  Json ReadJson() {
    std::ifstream f(SensitivityCachePath(cache_, "00ff"));
    return Json::parse(f);
  }
  void WriteRaw(const std::string& text) {
    std::ofstream(SensitivityCachePath(cache_, "00ff"), std::ios::trunc) << text;
  }

  store::testing::TempDir dir_;
  std::string text_, cache_;
  SensitivityCalibration calib_;
  tokenizer::Tokenizer tok_ = tokenizer::testing::ByteTokenizer();
};

INSTANTIATE_TEST_SUITE_P(Archs, SensitivityCacheTest, ::testing::Values("llama"));

TEST_P(SensitivityCacheTest, RoundTripAndCorruptFiles) {
  const std::vector<double> want = Expected();
  ASSERT_EQ(want.size(), 3u);
  EXPECT_GT(want[1] + want[2], 1e-4);

  auto none = Load("");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, want);
  EXPECT_FALSE(std::filesystem::exists(cache_));

  auto first = Load(cache_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, want);
  const Json good = ReadJson();
  EXPECT_EQ(good["sensitivity"].get<std::vector<double>>(), want);
  auto again = Load(cache_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, want);

  // A valid file is what the next call returns (nothing is profiled).
  Json edited = good;
  edited["sensitivity"] = std::vector<double>{0.25, 0.5, 2.0};
  WriteRaw(edited.dump());
  auto cached = Load(cache_);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, (std::vector<double>{0.25, 0.5, 2.0}));

  // Every bad file is profiled again and replaced by a good one.
  std::vector<std::string> bad = {"", "not json{", "[1, 2, 3]", "{\"version\": 1}"};
  for (const Json& values :
       {Json{0.1, 0.2}, Json{0.1, 0.2, 0.3, 0.4}, Json{0.1, 2.5, 0.3}, Json{0.1, -0.5, 0.3},
        Json{0.1, "x", 0.3}, Json{0.1, nullptr, 0.3}, Json(0.1)}) {
    Json j = good;
    j["sensitivity"] = values;
    bad.push_back(j.dump());
  }
  for (const char* key : {"n_sink", "block", "overlap", "n_tokens", "tokens_xxh128", "text"}) {
    Json j = good;
    j["inputs"][key] = 7;
    bad.push_back(j.dump());
  }
  Json version = good;
  version["version"] = 2;
  bad.push_back(version.dump());
  std::string deep(100, '[');
  bad.push_back(deep);
  for (const std::string& text : bad) {
    WriteRaw(text);
    auto s = Load(cache_);
    ASSERT_TRUE(s.ok()) << text;
    EXPECT_EQ(*s, want) << text;
    EXPECT_EQ(ReadJson(), good) << text;
  }

  // Another fingerprint has its own file.
  auto other = LoadOrProfileSensitivity(*model_, &threads_, tok_, "11ee", cache_, calib_);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(std::filesystem::exists(SensitivityCachePath(cache_, "11ee")));
}

TEST_P(SensitivityCacheTest, TextMustCoverMoreThanOneBlock) {
  calib_.mask.block = 64;  // 64 tokens: all in the first block, nothing masked
  EXPECT_EQ(Load("").status().code(), ErrorCode::kFailedPrecondition);
  calib_.mask.block = 16;
  calib_.text_path = dir_ / "missing.txt";
  EXPECT_EQ(Load("").status().code(), ErrorCode::kNotFound);
}

TEST(SensitivityTextTest, ShippedTextIsLongEnough) {
  // Debian's base-files ships it; the default calibration needs more than one block of tokens,
  // so at least more bytes than that.
  std::ifstream f(kSensitivityText, std::ios::binary | std::ios::ate);
  ASSERT_TRUE(f.good()) << kSensitivityText;
  EXPECT_GT(static_cast<int64_t>(f.tellg()), SensitivityCalibration{}.mask.block);
}

}  // namespace
}  // namespace kvmem::memory
