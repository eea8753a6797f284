// ForwardMany and StepBatcher against engine::Forward run on each sequence alone: a batch of
// sequences in their own pools gives every sequence the logits it gets alone (bit for bit: the
// matmuls treat tokens independently and attention's chunking depends only on the rows a token
// reads), a bad piece leaves the others running, concurrent callers of a StepBatcher get what
// they get alone, and prompts are served round-robin over groups (tenants) then members.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <latch>
#include <memory>
#include <thread>

#include "engine/forward.h"
#include "engine/forward_many.h"
#include "engine/step_batcher.h"
#include "../model/tiny_model.h"

namespace kvmem::engine {
namespace {

using model::testing::BuildTinyGguf;
using model::testing::TempFile;
using model::testing::TinyConfig;

std::vector<int32_t> Tokens(int n, int seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (seed * 31 + i * 17 + i * i) % 60 + 1;
  return t;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ForwardManyTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TinyConfig c;
    c.arch = GetParam();
    if (c.arch == "gemma3") {
      c.n_layers = 6;
      c.rope_base = 1e6f;
      c.sliding_window = 6;  // the histories below outgrow it: released rows, windowed reads
    }
    file_ = std::make_unique<TempFile>(BuildTinyGguf(c, 5));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
  }

  // A sequence in a pool of its own, holding `history` (prefilled alone).
  struct Seq {
    std::unique_ptr<kv::KvPool> pool;
    std::unique_ptr<kv::KvSequence> seq;
  };
  Seq Make(std::span<const int32_t> history) {
    Seq s{std::make_unique<kv::KvPool>(model_->kv_geometry(16), 32), nullptr};
    s.seq = std::make_unique<kv::KvSequence>(s.pool.get());
    std::vector<float> logits;
    if (!history.empty()) {
      EXPECT_TRUE(Forward(*model_, &threads_, s.seq.get(), history, 0, false, &logits).ok());
    }
    return s;
  }

  std::unique_ptr<TempFile> file_;
  std::unique_ptr<model::Model> model_;
  ThreadPool threads_{2};
};

TEST_P(ForwardManyTest, EachSequenceGetsWhatItGetsAlone) {
  // a: decodes at depth 40; b: a 7-token chunk after 10 rows, all logits; c: a fresh prompt.
  const std::vector<int32_t> ha = Tokens(40, 1), hb = Tokens(10, 2), pb = Tokens(7, 3),
                             pc = Tokens(12, 4), da = {9};
  Seq a = Make(ha), b = Make(hb), c = Make({}), a1 = Make(ha), b1 = Make(hb), c1 = Make({});
  std::vector<float> la, lb, lc;
  for (int step = 0; step < 2; ++step) {  // the second step reads the rows the first stored
    SeqPiece pieces[] = {{a.seq.get(), da, a.seq->n_rows(), false, &la},
                         {b.seq.get(), pb, b.seq->n_rows(), true, &lb},
                         {c.seq.get(), pc, c.seq->n_rows(), false, &lc}};
    ManyScratch scratch;
    ForwardMany(*model_, &threads_, pieces, &scratch);
    for (const SeqPiece& p : pieces) ASSERT_TRUE(p.status.ok()) << p.status.ToString();
    std::vector<float> ra, rb, rc;
    ASSERT_TRUE(Forward(*model_, &threads_, a1.seq.get(), da, a1.seq->n_rows(), false, &ra).ok());
    ASSERT_TRUE(Forward(*model_, &threads_, b1.seq.get(), pb, b1.seq->n_rows(), true, &rb).ok());
    ASSERT_TRUE(Forward(*model_, &threads_, c1.seq.get(), pc, c1.seq->n_rows(), false, &rc).ok());
    EXPECT_TRUE(BitEqual(la, ra)) << "step " << step;
    EXPECT_TRUE(BitEqual(lb, rb)) << "step " << step;
    EXPECT_TRUE(BitEqual(lc, rc)) << "step " << step;
    EXPECT_EQ(lb.size(), pb.size() * model_->spec().n_vocab);
    EXPECT_EQ(a.seq->n_rows(), a1.seq->n_rows());
    for (int l = 0; l < model_->spec().n_layers; ++l) {
      EXPECT_EQ(a.seq->released_through(l), a1.seq->released_through(l)) << "layer " << l;
    }
  }
}

TEST_P(ForwardManyTest, ABadPieceLeavesTheOthersRunning) {
  const std::vector<int32_t> ha = Tokens(20, 5), da = {7}, bad = {3, 64};
  Seq a = Make(ha), b = Make(ha), a1 = Make(ha);
  std::vector<float> la, lb, ra;
  SeqPiece pieces[] = {{b.seq.get(), bad, b.seq->n_rows(), false, &lb},
                       {a.seq.get(), da, a.seq->n_rows(), false, &la}};
  ManyScratch scratch;
  ForwardMany(*model_, &threads_, pieces, &scratch);
  EXPECT_EQ(pieces[0].status.code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(b.seq->n_rows(), 20);  // nothing appended
  ASSERT_TRUE(pieces[1].status.ok());
  ASSERT_TRUE(Forward(*model_, &threads_, a1.seq.get(), da, 20, false, &ra).ok());
  EXPECT_TRUE(BitEqual(la, ra));
}

// Greedy decoding of one sequence: prompt, then `steps` tokens; through `forward`.
template <typename F>
std::vector<float> Decode(F forward, kv::KvSequence* seq, std::span<const int32_t> prompt,
                          int steps, int n_vocab) {
  std::vector<float> logits, all;
  if (!forward(seq, prompt, 0, &logits).ok()) return {};
  for (int i = 0; i < steps; ++i) {
    all.insert(all.end(), logits.begin(), logits.end());
    const int32_t next = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.begin() + n_vocab) - logits.begin());
    if (!forward(seq, std::span(&next, 1), seq->n_rows(), &logits).ok()) return {};
  }
  return all;
}

TEST_P(ForwardManyTest, ConcurrentCallersGetWhatTheyGetAlone) {
  const int kSeqs = 4, kSteps = 12, n_vocab = model_->spec().n_vocab;
  StepBatcher::Options o;
  o.max_step_tokens = 8;  // prompts go in chunks, beside decode steps
  o.chunk_while_decoding = 3;
  o.gather = std::chrono::milliseconds(20);
  StepBatcher batcher(*model_, &threads_, o);
  std::vector<Seq> seqs, alone;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kSeqs; ++i) {
    seqs.push_back(Make({}));
    alone.push_back(Make({}));
    prompts.push_back(Tokens(5 + 7 * i, 10 + i));
  }
  std::vector<std::vector<float>> got(kSeqs);
  std::vector<std::thread> threads;
  // All callers start together: on a loaded machine (a sanitizer build beside other tests) a
  // thread started late could otherwise decode alone after the others finished.
  std::latch start(kSeqs);
  for (int i = 0; i < kSeqs; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      StepBatcher::Scope scope(/*group=*/i % 2, /*member=*/i);
      auto fwd = [&](kv::KvSequence* s, std::span<const int32_t> t, int64_t pos,
                     std::vector<float>* l) { return batcher.Forward(s, t, pos, false, l); };
      got[i] = Decode(fwd, seqs[i].seq.get(), prompts[i], kSteps, n_vocab);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSeqs; ++i) {
    auto fwd = [&](kv::KvSequence* s, std::span<const int32_t> t, int64_t pos,
                   std::vector<float>* l) {
      return Forward(*model_, &threads_, s, t, pos, false, l, o.max_step_tokens);
    };
    const std::vector<float> want = Decode(fwd, alone[i].seq.get(), prompts[i], kSteps, n_vocab);
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps) * n_vocab);
    EXPECT_TRUE(BitEqual(got[i], want)) << "sequence " << i;
  }
  const StepStats st = batcher.stats();
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  EXPECT_EQ(st.tokens, prompt_tokens + kSeqs * kSteps);
  EXPECT_EQ(st.decode_tokens, kSeqs * kSteps);
  // Steps were shared: fewer steps than pieces.
  EXPECT_LT(st.steps, kSeqs * kSteps) << "no step served two sequences";
  EXPECT_EQ(st.waiting, 0);
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardManyTest,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma3"));

// One tenant's four agents queued before another tenant's one: prompts are served round-robin
// over tenants, so the lone agent's prompt is done long before the others' (first come, first
// served would do it last).
TEST(StepBatcherFairness, ATenantWithManyAgentsDoesNotStarveAnother) {
  const auto file = std::make_unique<TempFile>(BuildTinyGguf(TinyConfig{}, 6));
  auto m = model::Model::Load(file->path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ThreadPool threads(1);
  constexpr int kPrompt = 16;
  std::vector<std::unique_ptr<kv::KvPool>> pools;
  std::vector<std::unique_ptr<kv::KvSequence>> seqs;
  for (int i = 0; i < 5; ++i) {
    pools.push_back(std::make_unique<kv::KvPool>((*m)->kv_geometry(16), 4));
    seqs.push_back(std::make_unique<kv::KvSequence>(pools.back().get()));
  }
  std::vector<int64_t> last_step(5, -1);  // the last step that served each sequence
  int64_t steps = 0;
  StepBatcher::Options o;
  o.max_step_tokens = 1;  // one prompt token per step
  o.gather = std::chrono::microseconds(0);
  o.on_step = [&](std::span<const kv::KvSequence* const> served) {
    ++steps;
    for (const kv::KvSequence* s : served) {
      for (int i = 0; i < 5; ++i) {
        if (seqs[i].get() == s) last_step[i] = steps;
      }
    }
  };
  StepBatcher batcher(**m, &threads, o);
  const std::vector<int32_t> prompt = Tokens(kPrompt, 7);
  std::vector<std::thread> callers;
  {
    auto hold = batcher.Exclusive();  // every caller queues before a step runs
    for (int i = 0; i < 5; ++i) {
      callers.emplace_back([&, i] {
        StepBatcher::Scope scope(/*tenant=*/i < 4 ? 1 : 2, /*agent=*/i);
        std::vector<float> logits;
        EXPECT_TRUE(batcher.Forward(seqs[i].get(), prompt, 0, false, &logits).ok());
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // tenant 2's agent comes last
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(steps, 5 * kPrompt);
  // Tenant 2 gets every other step: done after about 2 * kPrompt steps, while tenant 1's agents
  // share the other half and finish near 5 * kPrompt.
  EXPECT_LE(last_step[4], 2 * kPrompt + 1);
  for (int i = 0; i < 4; ++i) EXPECT_GT(last_step[i], 3 * kPrompt) << "agent " << i;
}

}  // namespace
}  // namespace kvmem::engine
