// The KV substrate memory policies stand on, each capability against a reference computed
// another way (tiny random models of each architecture, F32 weights so differences are only
// those the capability is allowed to make):
//   re-positioning without recompute (three moves) vs keys rotated directly at the new
//   positions in double precision; hidden rows vs runs where the row never existed; dead slots
//   vs hidden rows; per-head views; custom visibility vs separate runs; taps (Q rows, attention
//   weights) vs direct computation; view changes and token dropping between layers.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/fp16.h"
#include "engine/forward.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "../model/tiny_model.h"

namespace kvmem::engine {
namespace {

using model::testing::BuildTinyGguf;
using model::testing::TempFile;
using model::testing::TinyConfig;

class SubstrateTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TinyConfig c;
    c.arch = GetParam();
    file_ = std::make_unique<TempFile>(BuildTinyGguf(c, 5));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(kBlockRows), 64);
    for (int i = 0; i < 48; ++i) tokens_.push_back((i * 37 + 11) % model_->spec().n_vocab);
  }

  // Runs tokens [begin, end) of tokens_ at positions given by pos(i).
  Status Run(kv::KvSequence* seq, int begin, int end, int64_t first_pos, std::vector<float>* out) {
    return Forward(*model_, &threads_, seq, std::span(tokens_).subspan(begin, end - begin),
                   first_pos, false, out);
  }

  // The reference for re-positioning: the stored key of `row`, un-rotated from old_pos and
  // rotated to new_pos in double precision with directly computed angles, rounded to f16 once.
  void RotateDirect(kv::RowRef row, int64_t new_pos) {
    const model::ModelSpec& s = model_->spec();
    const int64_t old_pos = pool_->rotated_pos(row);
    const int half = s.rope_dim / 2;
    for (int l = 0; l < s.n_layers; ++l) {
      for (int g = 0; g < s.n_kv_heads; ++g) {
        uint16_t* k = pool_->K(row.block, l, g) + static_cast<size_t>(row.row) * s.head_dim_k;
        for (int i = 0; i < half; ++i) {
          const double theta = std::pow(double(s.rope_freq_base), -2.0 * i / s.rope_dim);
          const double a = (new_pos - old_pos) * theta;
          const int i0 = s.rope_mode == kernels::RopeMode::kNeox ? i : 2 * i;
          const int i1 = s.rope_mode == kernels::RopeMode::kNeox ? i + half : 2 * i + 1;
          const double x0 = F16ToF32(k[i0]), x1 = F16ToF32(k[i1]);
          k[i0] = F32ToF16(static_cast<float>(x0 * std::cos(a) - x1 * std::sin(a)));
          k[i1] = F32ToF16(static_cast<float>(x0 * std::sin(a) + x1 * std::cos(a)));
        }
      }
    }
    pool_->set_rotated_pos(row, new_pos);
  }

  static constexpr int kBlockRows = 16;
  std::unique_ptr<TempFile> file_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvPool> pool_;
  ThreadPool threads_{2};
  std::vector<int32_t> tokens_;
};

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Re-places rows of `seq` at new positions in every layer's view. moves: (row, new position).
void SetViewPositions(kv::KvSequence* seq, const std::vector<std::pair<kv::RowRef, int64_t>>& moves) {
  kv::KvView& v = seq->view();
  std::vector<kv::ViewRun> runs;
  for (const auto& [row, pos] : moves) runs.push_back({row.block, row.row, 1, pos});
  for (int l = 0; l < v.n_layers(); ++l) v.mutable_layer(l) = runs;
}

// Three moves, each done twice — once by KvPool::Reposition, once by RotateDirect — then one
// more token decoded: logits agree within what one extra f16 rounding of the keys explains.
TEST_P(SubstrateTest, RepositioningMatchesDirectRotation) {
  struct Move {
    const char* name;
    // rows kept (indices into the 32 written rows) and the new position of each
    std::vector<int> kept;
    std::vector<int64_t> pos;
  };
  std::vector<Move> moves;
  {  // drop rows 8..15, shift the rest left
    Move m{"drop span, shift left", {}, {}};
    for (int i = 0; i < 32; ++i) {
      if (i >= 8 && i < 16) continue;
      m.kept.push_back(i);
      m.pos.push_back(static_cast<int64_t>(m.kept.size()) - 1);
    }
    moves.push_back(m);
  }
  {  // concatenate two non-contiguous blocks (rows 0..7 and 24..31) at 0..15
    Move m{"concatenate blocks", {}, {}};
    for (int i = 0; i < 8; ++i) m.kept.push_back(i);
    for (int i = 24; i < 32; ++i) m.kept.push_back(i);
    for (int i = 0; i < 16; ++i) m.pos.push_back(i);
    moves.push_back(m);
  }
  {  // history written at 1000.. placed at small positions 0..31
    Move m{"old history at small positions", {}, {}};
    for (int i = 0; i < 32; ++i) {
      m.kept.push_back(i);
      m.pos.push_back(i);
    }
    moves.push_back(m);
  }
  for (size_t mi = 0; mi < moves.size(); ++mi) {
    const Move& m = moves[mi];
    const int64_t base = mi == 2 ? 1000 : 0;
    std::vector<float> a, b, c, unused;
    const int32_t next[] = {tokens_[40]};
    // variant 0: Reposition; 1: direct rotation (reference); 2: keys left where they were.
    for (int variant = 0; variant < 3; ++variant) {
      kv::KvSequence seq(pool_.get());
      ASSERT_TRUE(Run(&seq, 0, 32, base, &unused).ok());
      std::vector<std::pair<kv::RowRef, int64_t>> placed;
      for (size_t i = 0; i < m.kept.size(); ++i) {
        const kv::RowRef r{seq.blocks()[m.kept[i] / kBlockRows], m.kept[i] % kBlockRows};
        if (variant == 0) {
          pool_->Reposition(r, 1, m.pos[i], model_->rope_specs());
        } else if (variant == 1) {
          RotateDirect(r, m.pos[i]);
        }
        placed.push_back({r, m.pos[i]});
      }
      SetViewPositions(&seq, placed);
      const int64_t next_pos = m.pos.back() + 1;
      std::vector<float>* out = variant == 0 ? &a : variant == 1 ? &b : &c;
      ASSERT_TRUE(Forward(*model_, &threads_, &seq, next, next_pos, false, out).ok());
    }
    // Keys differ by at most one f16 rounding (|k| * 2^-11); logits move by far less than 1e-2,
    // while not rotating at all moves them by much more.
    EXPECT_LT(MaxAbsDiff(a, b), 1e-2f) << m.name;
    EXPECT_GT(MaxAbsDiff(c, b), 1e-1f) << m.name;
  }
}

// A row hidden before anything depended on it reads exactly as if it had never been written.
TEST_P(SubstrateTest, HiddenRowEqualsNeverWritten) {
  std::vector<float> a, b, unused;
  kv::KvSequence with(pool_.get());
  ASSERT_TRUE(Run(&with, 0, 5, 0, &unused).ok());
  with.view().Hide({with.blocks()[0], 4}, 1);
  ASSERT_TRUE(Run(&with, 5, 12, 5, &a).ok());

  kv::KvSequence without(pool_.get());
  ASSERT_TRUE(Run(&without, 0, 4, 0, &unused).ok());
  ASSERT_TRUE(Run(&without, 5, 12, 5, &b).ok());
  EXPECT_EQ(MaxAbsDiff(a, b), 0.0f);

  // A dead slot in its place reads the same as the hidden row.
  std::vector<float> c;
  kv::KvSequence dead(pool_.get());
  ASSERT_TRUE(Run(&dead, 0, 5, 0, &unused).ok());
  dead.view().Kill({dead.blocks()[0], 4}, 1);
  EXPECT_EQ(dead.view().n_slots(0), 5);
  EXPECT_EQ(dead.view().n_rows(0), 4);
  ASSERT_TRUE(Run(&dead, 5, 12, 5, &c).ok());
  EXPECT_EQ(MaxAbsDiff(a, c), 0.0f);
}

// Reducing one KV head's list changes the attention output of exactly the query heads of that
// KV head.
TEST_P(SubstrateTest, PerHeadViewChangesOnlyThatHead) {
  const model::ModelSpec& s = model_->spec();
  kv::KvSequence seq(pool_.get());
  std::vector<float> unused;
  ASSERT_TRUE(Run(&seq, 0, 20, 0, &unused).ok());
  const int layer = 1;
  // Layer input: recompute token 20's layer-1 Q/K/V from an arbitrary residual vector.
  model::BlockScratch scratch;
  scratch.Resize(s, 1);
  std::vector<float> x(s.n_embd);
  for (int i = 0; i < s.n_embd; ++i) x[i] = std::sin(0.3f * i);
  const int64_t pos[] = {20};
  auto rows = seq.AppendRows(1, 20);
  ASSERT_TRUE(rows.ok());
  model::ProjectQkv(s, layer, model_->weights().layers[layer], x.data(), pos, scratch, &threads_);
  model::StoreKv(s, layer, scratch, *rows, pos, *pool_);
  model::Visibility vis{pos, {}};
  model::Attend(s, layer, seq.view(), *pool_, vis, {}, scratch, &threads_);
  const std::vector<float> full = scratch.attn;

  const int g = 1;
  seq.view().Hide({seq.blocks()[0], 3}, 6, layer, g);  // rows 3..8 gone for KV head 1 only
  model::Attend(s, layer, seq.view(), *pool_, vis, {}, scratch, &threads_);
  const int group = s.n_heads / s.n_kv_heads;
  for (int h = 0; h < s.n_heads; ++h) {
    float diff = 0;
    for (int d = 0; d < s.head_dim_v; ++d) {
      diff = std::max(diff, std::fabs(full[h * s.head_dim_v + d] - scratch.attn[h * s.head_dim_v + d]));
    }
    if (h / group == g) {
      EXPECT_GT(diff, 1e-4f) << "head " << h;
    } else {
      EXPECT_EQ(diff, 0.0f) << "head " << h;
    }
  }
}

// A scoring prompt that sees only block X of the history and leaves nothing behind equals a
// separate run over X alone.
TEST_P(SubstrateTest, CustomVisibilityEqualsSeparateRun) {
  kv::KvSequence seq(pool_.get());
  std::vector<float> unused, scored, reference;
  ASSERT_TRUE(Run(&seq, 0, 32, 0, &unused).ok());  // blocks X (rows 0..15) and Y (16..31)
  const int blocks_before = pool_->blocks_in_use();

  Batch b;
  for (int i = 0; i < 4; ++i) {
    b.tokens.push_back(tokens_[40 + i]);
    b.positions.push_back(32 + i);
  }
  b.all_logits = true;
  b.persist = false;
  b.visible.assign(4, {model::RowRange{seq.blocks()[0], 0, kBlockRows}});
  ForwardPass fp(*model_, &threads_);
  ASSERT_TRUE(fp.Begin(b, &seq).ok());
  while (!fp.done()) fp.StepLayer();
  fp.Finish(&scored);
  EXPECT_EQ(seq.n_rows(), 32);
  EXPECT_EQ(seq.view().n_rows(0), 32);
  EXPECT_EQ(pool_->blocks_in_use(), blocks_before);

  kv::KvSequence x_only(pool_.get());
  ASSERT_TRUE(Run(&x_only, 0, 16, 0, &unused).ok());
  Batch r = b;
  r.visible.clear();
  r.persist = true;
  ForwardPass fr(*model_, &threads_);
  ASSERT_TRUE(fr.Begin(r, &x_only).ok());
  while (!fr.done()) fr.StepLayer();
  fr.Finish(&reference);
  EXPECT_EQ(MaxAbsDiff(scored, reference), 0.0f);
}

// The tap's Q rows and attention weights against a direct double-precision computation from the
// model's F32 weights and the stored keys.
TEST_P(SubstrateTest, TapQueriesAndWeightsMatchDirectComputation) {
  const model::ModelSpec& s = model_->spec();
  kv::KvSequence seq(pool_.get());
  std::vector<float> unused;
  ASSERT_TRUE(Run(&seq, 0, 10, 0, &unused).ok());

  ForwardPass fp(*model_, &threads_);
  Batch b;
  b.tokens = {tokens_[10], tokens_[11]};
  b.positions = {10, 11};
  int checked = 0;
  fp.set_tap([&](const TapContext& tap) {
    if (tap.layer() != 0) return;
    // Layer 0 input is the embedding row: q = RoPE(Wq . rmsnorm(e) * norm_w).
    const auto& w = model_->weights();
    const int t = 1, h = 3;
    std::vector<float> e(s.n_embd), xn(s.n_embd), q(s.q_dim());
    kernels::DequantizeRow(w.tok_embd, b.tokens[t], e.data());
    double ss = 0;
    for (float v : e) ss += double(v) * v;
    const double inv = 1.0 / std::sqrt(ss / s.n_embd + s.rms_eps);
    for (int i = 0; i < s.n_embd; ++i) xn[i] = static_cast<float>(e[i] * inv * w.layers[0].attn_norm[i]);
    std::vector<float> wq(s.n_embd);
    for (int r = 0; r < s.q_dim(); ++r) {
      kernels::DequantizeRow(w.layers[0].wq, r, wq.data());
      double acc = 0;
      for (int i = 0; i < s.n_embd; ++i) acc += double(wq[i]) * xn[i];
      q[r] = static_cast<float>(acc + (w.layers[0].bq.empty() ? 0.0 : w.layers[0].bq[r]));
    }
    float* qh = q.data() + h * s.head_dim_k;
    if (s.qk_norm) kernels::GetOps(kernels::Isa::kScalar).rms_norm(qh, w.layers[0].q_norm.data(), qh, s.head_dim_k, s.rms_eps);
    kernels::Rope(qh, 1, s.head_dim_k, s.rope_dim, b.positions[t], s.rope_freq_base, s.rope_mode);
    const float* got = tap.q().data() + (t * s.n_heads + h) * s.head_dim_k;
    for (int d = 0; d < s.head_dim_k; ++d) ASSERT_NEAR(got[d], qh[d], 1e-4f) << d;

    // Weights over the 12 rows token 11 reads: softmax of scale * q . k from the stored keys.
    std::vector<float> weights;
    std::vector<kv::RowRef> rows;
    tap.AttentionWeights(t, h, &weights, &rows);
    ASSERT_EQ(rows.size(), 12u);
    const int g = h / (s.n_heads / s.n_kv_heads);
    std::vector<double> logit(rows.size());
    double mx = -1e300, sum = 0;
    for (size_t j = 0; j < rows.size(); ++j) {
      const uint16_t* k = pool_->K(rows[j].block, 0, g) + rows[j].row * s.head_dim_k;
      double dot = 0;
      for (int d = 0; d < s.head_dim_k; ++d) dot += double(got[d]) * F16ToF32(k[d]);
      logit[j] = dot * s.attn_scale();
      mx = std::max(mx, logit[j]);
    }
    for (double& v : logit) sum += (v = std::exp(v - mx));
    for (size_t j = 0; j < rows.size(); ++j) EXPECT_NEAR(weights[j], logit[j] / sum, 1e-5) << j;
    ++checked;
  });
  ASSERT_TRUE(fp.Begin(b, &seq).ok());
  while (!fp.done()) fp.StepLayer();
  EXPECT_EQ(checked, 1);
}

// Views of later layers changed from inside the tap equal the same views set before the pass.
TEST_P(SubstrateTest, ViewChangeBetweenLayers) {
  std::vector<float> a, b, unused;
  auto run = [&](bool in_tap, std::vector<float>* out) {
    kv::KvSequence seq(pool_.get());
    ASSERT_TRUE(Run(&seq, 0, 16, 0, &unused).ok());
    const kv::RowRef first{seq.blocks()[0], 2};
    auto hide_deep = [&] {
      for (int l = 1; l < model_->spec().n_layers; ++l) seq.view().Hide(first, 5, l);
    };
    if (!in_tap) hide_deep();
    ForwardPass fp(*model_, &threads_);
    fp.set_tap([&](const TapContext& tap) {
      if (in_tap && tap.layer() == 0) hide_deep();
    });
    Batch bt;
    bt.tokens = {tokens_[16], tokens_[17]};
    bt.positions = {16, 17};
    ASSERT_TRUE(fp.Begin(bt, &seq).ok());
    while (!fp.done()) fp.StepLayer();
    fp.Finish(out);
  };
  run(false, &a);
  run(true, &b);
  EXPECT_EQ(MaxAbsDiff(a, b), 0.0f);
  // And the change mattered: without hiding, the logits differ.
  kv::KvSequence seq(pool_.get());
  std::vector<float> c;
  ASSERT_TRUE(Run(&seq, 0, 16, 0, &unused).ok());
  const int32_t two[] = {tokens_[16], tokens_[17]};
  ASSERT_TRUE(Forward(*model_, &threads_, &seq, two, 16, false, &c).ok());
  EXPECT_GT(MaxAbsDiff(a, c), 1e-4f);
}

// Recomputing cached tokens with only the last one kept after layer 0: since the cached rows
// of the dropped tokens hold exactly what recomputation would produce, the logits equal a full
// pass; with stale cached rows they do not.
TEST_P(SubstrateTest, DroppedTokensContributeTheirCachedRows) {
  std::vector<float> full, partial, unused;
  kv::KvSequence seq(pool_.get());
  ASSERT_TRUE(Run(&seq, 0, 12, 0, &full).ok());

  auto recompute = [&](std::vector<float>* out) {
    Batch b;
    for (int i = 0; i < 12; ++i) {
      b.tokens.push_back(tokens_[i]);
      b.positions.push_back(i);
      b.rows.push_back({seq.blocks()[0], i});
    }
    ForwardPass fp(*model_, &threads_);
    ASSERT_TRUE(fp.Begin(b, &seq).ok());
    fp.StepLayer();
    const int keep[] = {11};
    ASSERT_TRUE(fp.KeepTokens(keep).ok());
    while (!fp.done()) fp.StepLayer();
    fp.Finish(out);
  };
  recompute(&partial);
  EXPECT_LT(MaxAbsDiff(full, partial), 1e-5f);

  // Make the cached rows stale: overwrite rows 0..10 at deep layers with another context's.
  kv::KvSequence other(pool_.get());
  std::vector<int32_t> swapped(tokens_.begin() + 20, tokens_.begin() + 32);
  ASSERT_TRUE(Forward(*model_, &threads_, &other, swapped, 0, false, &unused).ok());
  const model::ModelSpec& s = model_->spec();
  for (int l = 1; l < s.n_layers; ++l) {
    for (int g = 0; g < s.n_kv_heads; ++g) {
      std::copy_n(pool_->K(other.blocks()[0], l, g), 11 * s.head_dim_k, pool_->K(seq.blocks()[0], l, g));
      std::copy_n(pool_->V(other.blocks()[0], l, g), 11 * s.head_dim_v, pool_->V(seq.blocks()[0], l, g));
    }
  }
  recompute(&partial);
  EXPECT_GT(MaxAbsDiff(full, partial), 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(Archs, SubstrateTest, ::testing::Values("llama", "qwen2", "qwen3"));

}  // namespace
}  // namespace kvmem::engine
