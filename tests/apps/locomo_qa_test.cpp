// The method sweep of `kvmem eval locomo` (eval/locomo_qa.h ExpandLocomoMethods): names,
// configurations and refusals. Then the h2o method run end to end on tiny random models with a
// byte-level tokenizer (one token per byte, so the history's length is its rendered text's),
// against full context: a budget above the history evicts nothing and must give full's answer
// NLL and answer bit for bit (also after a small budget ran on the same shared history); a small
// budget keeps exactly that many history rows per (layer, KV head) next to the question. BM25
// of every turn against full context, with a sliding-window model too.
#include "eval/locomo_qa.h"

#include <gtest/gtest.h>

#include <map>

#include "../model/tiny_model.h"
#include "../tokenizer/test_util.h"
#include "eval/locomo.h"
#include "tokenizer/unicode.h"

namespace kvmem::eval {
namespace {

TEST(LocomoMethods, ExpandsTheSweep) {
  LocomoSweep s;
  s.names = {"full", "memart", "memart-coupled", "bm25", "embed"};
  s.block_sizes = {8, 16};
  s.strategies = {"softmax-sum", "rr-max"};
  s.top_k = {4, 32};
  s.bm25_k = {5, 10};
  s.embed_k = {3};
  s.keep_last = 48;
  auto m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 1u + 8 + 8 + 2 + 1);
  EXPECT_EQ((*m)[0].name, "full");
  EXPECT_EQ((*m)[0].kind, LocomoMethodKind::kFull);
  EXPECT_EQ((*m)[1].name, "memart/softmax-sum/bs8/k4");
  EXPECT_EQ((*m)[1].memart.block_size, 8);
  EXPECT_EQ((*m)[1].memart.top_k, 4);
  EXPECT_EQ((*m)[1].memart.keep_last, 48);
  EXPECT_FALSE((*m)[1].memart.coupled_positions);
  EXPECT_EQ((*m)[8].name, "memart/rr-max/bs16/k32");
  EXPECT_EQ((*m)[8].memart.strategy.norm, memory::ScoreNorm::kReciprocalRank);
  EXPECT_EQ((*m)[8].memart.strategy.agg, memory::ScoreAgg::kMax);
  EXPECT_EQ((*m)[9].name, "memart-coupled/softmax-sum/bs8/k4");
  EXPECT_TRUE((*m)[9].memart.coupled_positions);
  EXPECT_EQ((*m)[17].name, "bm25/k5");
  EXPECT_EQ((*m)[18].turns_k, 10);
  EXPECT_EQ((*m)[19].name, "embed/k3");
  EXPECT_EQ((*m)[19].kind, LocomoMethodKind::kEmbed);
  EXPECT_EQ((*m)[19].turns_k, 3);
}

TEST(LocomoMethods, RefusesBadInput) {
  LocomoSweep s;
  s.names = {"h2o-ish"};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.names = {"memart"};
  s.block_sizes = {12};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.block_sizes = {16};
  s.strategies = {"softmax-mean"};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.strategies = {"softmax-sum"};
  s.top_k = {};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s = {};
  s.names = {"bm25"};
  s.bm25_k = {0};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.names = {"embed"};
  s.embed_k = {-1};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.embed_k = {};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.names = {};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
}

TEST(LocomoMethods, MemArtHeadsCarryTheirHeads) {
  LocomoSweep s;
  s.names = {"memart-heads-text"};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());  // no heads given
  s.names = {"memart", "memart-heads"};
  s.strategies = {"rr-max"};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());  // no heads given
  s.retrieval_heads = {{7, 1}, {5, 3}};
  auto m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].name, "memart/rr-max/bs16/k16");
  EXPECT_TRUE((*m)[0].memart.retrieval_heads.empty());
  EXPECT_EQ((*m)[1].name, "memart-heads/rr-max/bs16/k16");
  EXPECT_EQ((*m)[1].kind, LocomoMethodKind::kMemArt);
  EXPECT_EQ((*m)[1].memart.retrieval_heads, s.retrieval_heads);
  EXPECT_FALSE((*m)[1].blocks_as_text);
  s.names = {"memart-heads-text"};
  m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)[0].name, "memart-heads-text/rr-max/bs16/k16");
  EXPECT_TRUE((*m)[0].blocks_as_text);
  EXPECT_EQ((*m)[0].memart.retrieval_heads, s.retrieval_heads);
}

TEST(LocomoMethods, TurnBoundedNeighboursAreTheirOwnMethods) {
  LocomoSweep s;
  s.names = {"memart"};
  s.neighbors = {0, 2};
  s.turn_bounded = {0, 1};
  auto m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // Bounding no neighbours is the plain method, not a method of its own.
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].name, "memart/softmax-sum/bs16/k16");
  EXPECT_EQ((*m)[1].name, "memart/softmax-sum/bs16/k16/nb2");
  EXPECT_FALSE((*m)[1].memart.turn_bounded);
  EXPECT_EQ((*m)[2].name, "memart/softmax-sum/bs16/k16/nb2/turn");
  EXPECT_TRUE((*m)[2].memart.turn_bounded);
  EXPECT_EQ((*m)[2].memart.neighbors, 2);
  s.turn_bounded = {2};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.turn_bounded = {};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
}

TEST(LocomoMethods, WholeTurnsAreTheirOwnMethodsWithHeadsAndNoNeighbours) {
  LocomoSweep s;
  s.names = {"memart", "memart-heads"};
  s.retrieval_heads = {{1, 0}};
  s.neighbors = {2, 0};
  s.whole_turns = {0, 1};
  auto m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // Whole turns need retrieval heads and no neighbours: one such method.
  ASSERT_EQ(m->size(), 5u);
  EXPECT_EQ((*m)[0].name, "memart/softmax-sum/bs16/k16/nb2");
  EXPECT_EQ((*m)[1].name, "memart/softmax-sum/bs16/k16");
  EXPECT_EQ((*m)[2].name, "memart-heads/softmax-sum/bs16/k16/nb2");
  EXPECT_EQ((*m)[3].name, "memart-heads/softmax-sum/bs16/k16");
  EXPECT_FALSE((*m)[3].memart.whole_turns);
  EXPECT_EQ((*m)[4].name, "memart-heads/softmax-sum/bs16/k16/whole");
  EXPECT_TRUE((*m)[4].memart.whole_turns);
  EXPECT_EQ((*m)[4].memart.neighbors, 0);
  s.whole_turns = {3};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.whole_turns = {};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
}

TEST(LocomoMethods, QuestionScoredVariantsAreTheirOwnMethods) {
  LocomoSweep s;
  s.names = {"memart"};
  s.neighbors = {0, 2};
  s.turn_bounded = {1};
  s.score_spans = {"prompt", "content", "question"};
  auto m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 3u);  // turn-bounding no neighbours is no method
  EXPECT_EQ((*m)[0].name, "memart/softmax-sum/bs16/k16/nb2/turn");
  EXPECT_EQ((*m)[0].score_span, ScoreSpan::kPrompt);
  EXPECT_EQ((*m)[1].name, "memart/softmax-sum/bs16/k16/nb2/turn/c");
  EXPECT_EQ((*m)[1].score_span, ScoreSpan::kContent);
  EXPECT_EQ((*m)[2].name, "memart/softmax-sum/bs16/k16/nb2/turn/q");
  EXPECT_EQ((*m)[2].score_span, ScoreSpan::kQuestion);
  EXPECT_EQ((*m)[2].memart.neighbors, 2);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{}, {"prompt", "answer"}, {"Question"}}) {
    s.score_spans = bad;
    EXPECT_EQ(ExpandLocomoMethods(s).status().code(), ErrorCode::kInvalidArgument);
  }
}

TEST(LocomoMethods, ExpandsEpiCacheAndItsBaselinesOverBudgets) {
  LocomoSweep s;
  s.names = {"epicache", "epicache-online", "streamingllm", "snapkv", "keydiff", "infinipot"};
  s.epicache_budget = {1024, 2048};
  auto m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 12u);
  EXPECT_EQ((*m)[0].name, "epicache/M1024");
  EXPECT_EQ((*m)[0].policy, "epicache");
  EXPECT_TRUE((*m)[0].rebuild);  // the offline build
  EXPECT_EQ((*m)[0].config["layer_budgets"], "sensitivity");
  EXPECT_EQ((*m)[3].name, "epicache-online/M2048");
  EXPECT_FALSE((*m)[3].rebuild);
  EXPECT_EQ((*m)[3].config["regroup"], 2.0);
  EXPECT_EQ((*m)[3].config["layer_budgets"], "uniform");  // the policy's default
  EXPECT_EQ((*m)[3].config["positions"], "kept");
  EXPECT_EQ((*m)[4].config["scoring"], "recency");
  EXPECT_EQ((*m)[7].config["scoring"], "window");
  EXPECT_EQ((*m)[9].config["scoring"], "keydiff");
  EXPECT_EQ((*m)[11].name, "infinipot/M2048");
  EXPECT_EQ((*m)[11].config["scoring"], "generic");
  EXPECT_EQ((*m)[11].config["budget"], 2048);
  s.positions = "compact";
  m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)[4].name, "streamingllm/M1024/compact");
  EXPECT_EQ((*m)[4].config["positions"], "compact");
  s.epicache_budget = {8};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
}

TEST(LocomoMethods, ExpandsH2oBudgets) {
  LocomoSweep s;
  s.names = {"h2o"};
  auto def = ExpandLocomoMethods(s);
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  ASSERT_EQ(def->size(), 1u);
  EXPECT_EQ((*def)[0].name, "h2o/b256");  // MemArt's default decode KV: bs 16 x k 16
  EXPECT_EQ((*def)[0].kind, LocomoMethodKind::kH2O);
  EXPECT_EQ((*def)[0].h2o.budget, 256);
  EXPECT_EQ((*def)[0].h2o.recent_ratio, 0.5);
  s.h2o_budget = {64, 512};
  auto m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[1].name, "h2o/b512");
  EXPECT_EQ((*m)[1].h2o.budget, 512);
  s.h2o_budget = {0};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.h2o_budget = {};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
}

// ChatML, recognized by its markers (tokenizer/chat_template.h), without a system turn.
constexpr const char* kChatMl =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n";

// Ids 0..255: the bytes (GPT-2's byte alphabet), no merges; then ChatML's control tokens.
tokenizer::TokenizerConfig ByteTokenizer(const std::string& chat_template = kChatMl) {
  tokenizer::TokenizerConfig c;
  c.model = "gpt2";
  c.pre = "gpt2";
  c.chat_template = chat_template;
  for (int b = 0; b < 256; ++b) {
    std::string piece;
    tokenizer::AppendUtf8(tokenizer::ByteToUnicode(static_cast<uint8_t>(b)), &piece);
    c.tokens.push_back(piece);
  }
  c.token_types.assign(256, 1);
  for (const char* special : {"<|im_start|>", "<|im_end|>"}) {
    c.tokens.push_back(special);
    c.token_types.push_back(3);  // control
  }
  c.eos_id = 257;
  return c;
}

LocomoConversation SmallConversation() {
  LocomoConversation c;
  c.id = "tiny";
  c.speaker_a = "Ann";
  c.speaker_b = "Bob";
  c.sessions = {{1,
                 "1:00 pm on 1 May, 2023",
                 {{"Ann", "D1:1", "I bought a red bike today.", ""},
                  {"Bob", "D1:2", "Nice! Where will you ride it?", ""},
                  {"Ann", "D1:3", "Along the river to work.", ""},
                  {"Bob", "D1:4", "I am moving to Paris next month.", ""}}},
                {2,
                 "2:00 pm on 9 May, 2023",
                 {{"Ann", "D2:1", "How was the move?", ""},
                  {"Bob", "D2:2", "Great, my flat is near the Seine.", ""}}}};
  c.qa = {{"What did Ann buy?", "a red bike", "", {"D1:1"}, 4},
          {"Where did Bob move?", "Paris", "", {"D1:4", "D2:2"}, 1}};
  return c;
}

class LocomoH2oTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model::testing::TinyConfig c;
    c.arch = GetParam();
    c.n_vocab = 258;
    file_ = std::make_unique<model::testing::TempFile>(model::testing::BuildTinyGguf(c, 13));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    auto t = tokenizer::Tokenizer::Create(ByteTokenizer());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tok_ = std::make_unique<tokenizer::Tokenizer>(std::move(*t));
  }

  // Runs the methods on one conversation; each answered question lands in (*by_method)[method].
  Result<std::vector<LocomoMethodResult>> Run(
      const LocomoConversation& conv, const std::vector<LocomoMethod>& methods,
      const LocomoQaOptions& o, std::map<std::string, std::vector<QaRecord>>* by_method) {
    return RunLocomoQa(*model_, *tok_, &threads_, {conv}, methods, o,
                       [by_method](const QaRecord& q) { (*by_method)[q.method].push_back(q); });
  }

  std::unique_ptr<model::testing::TempFile> file_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  ThreadPool threads_{2};
};

TEST_P(LocomoH2oTest, LargeBudgetIsFullContextAndSmallBudgetKeepsItsRows) {
  const LocomoConversation conv = SmallConversation();
  // The history as BuildHistory cuts it: every turn's line with its line break.
  const RenderedConversation r = RenderConversation(conv);
  const std::string history = r.text.substr(0, r.turns.back().end + 1);
  ASSERT_EQ(tok_->Encode(history, false).size(), history.size());  // one token per byte
  const double n_hist = static_cast<double>(history.size());
  const int small = 16;

  LocomoSweep sweep;
  sweep.names = {"full", "h2o"};
  sweep.h2o_budget = {small, 100000};  // the large budget runs after the small one
  auto methods = ExpandLocomoMethods(sweep);
  ASSERT_TRUE(methods.ok()) << methods.status().ToString();
  LocomoQaOptions o;
  o.answer_tokens = 1;  // decode adds exactly one row: the prompt's last token
  std::map<std::string, std::vector<QaRecord>> rec;
  auto results = Run(conv, *methods, o, &rec);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 3u);
  for (const LocomoMethodResult& m : *results) EXPECT_EQ(m.truncated_tokens, 0) << m.method;
  const std::vector<QaRecord>& full = rec["full"];
  const std::vector<QaRecord>& big = rec["h2o/b100000"];
  const std::vector<QaRecord>& cut = rec["h2o/b16"];
  ASSERT_EQ(full.size(), 2u);
  ASSERT_EQ(big.size(), 2u);
  ASSERT_EQ(cut.size(), 2u);
  bool any_nll_moved = false;
  for (size_t i = 0; i < full.size(); ++i) {
    SCOPED_TRACE(full[i].question);
    const QaSums& f = full[i].metrics;
    ASSERT_EQ(big[i].question, full[i].question);
    // Nothing evicted: the same cache, so the same numbers exactly.
    EXPECT_EQ(big[i].metrics.answer_nll, f.answer_nll);
    EXPECT_EQ(big[i].prediction, full[i].prediction);
    EXPECT_EQ(big[i].metrics.prefill_tokens, f.prefill_tokens);
    EXPECT_EQ(big[i].metrics.kv_len_decode, f.kv_len_decode);
    EXPECT_EQ(f.evidence_recall, 1.0);
    EXPECT_EQ(big[i].metrics.evidence_recall, 1.0);
    // Full reads the history and the prompt; the small budget keeps `small` history rows in
    // every (layer, KV head) and the whole prompt, after prefilling everything.
    const double prompt = f.prefill_tokens - n_hist;
    ASSERT_GT(prompt, 0);
    EXPECT_EQ(f.kv_len_decode, n_hist + prompt);
    EXPECT_EQ(cut[i].metrics.prefill_tokens, f.prefill_tokens);
    EXPECT_EQ(cut[i].metrics.kv_len_decode, small + prompt);
    // Each evidence turn spans >= 30 rows; 8 of the 16 kept are the last turn's most recent
    // rows, so no evidence turn keeps half of its rows anywhere.
    EXPECT_EQ(cut[i].metrics.evidence_recall, 0.0);
    EXPECT_TRUE(std::isfinite(cut[i].metrics.answer_nll));
    any_nll_moved |= cut[i].metrics.answer_nll != f.answer_nll;
  }
  EXPECT_TRUE(any_nll_moved) << "evicting all but 16 history rows changed no answer NLL";
}

INSTANTIATE_TEST_SUITE_P(Archs, LocomoH2oTest, ::testing::Values("llama", "qwen2"));

// BM25 with k at least the number of turns re-inserts the whole history in order: the same
// tokens as full context, so the same NLL and answer exactly. On gemma3 (sliding window of 4
// in the tiny model) both must keep the rows that AnswerOn needs when it goes back from the
// scored gold answer to the prompt.
class LocomoTextTest : public LocomoH2oTest {};

TEST_P(LocomoTextTest, Bm25OfEveryTurnIsFullContext) {
  LocomoSweep sweep;
  sweep.names = {"full", "bm25"};
  sweep.bm25_k = {2, 100};
  auto methods = ExpandLocomoMethods(sweep);
  ASSERT_TRUE(methods.ok()) << methods.status().ToString();
  LocomoQaOptions o;
  o.answer_tokens = 4;
  // A short history and a gold answer that ends past the first pool block (256 rows): a
  // sequence releasing out-of-window rows would give back block 0 while scoring the answer, and
  // the prompt that decoding goes back to needs rows of it.
  LocomoConversation conv = SmallConversation();
  conv.sessions.resize(1);
  conv.sessions[0].turns.resize(2);
  conv.qa.resize(1);
  for (int i = 0; i < 8; ++i) conv.qa[0].answer += " and a red bike";
  std::map<std::string, std::vector<QaRecord>> rec;
  auto results = Run(conv, *methods, o, &rec);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  const std::vector<QaRecord>& full = rec["full"];
  const std::vector<QaRecord>& all = rec["bm25/k100"];
  const std::vector<QaRecord>& two = rec["bm25/k2"];
  ASSERT_EQ(full.size(), 1u);
  ASSERT_EQ(all.size(), 1u);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_LT(full[0].metrics.prefill_tokens, 256);
  EXPECT_GT(full[0].metrics.prefill_tokens + conv.qa[0].answer.size(), 256 + 8);
  for (size_t i = 0; i < full.size(); ++i) {
    SCOPED_TRACE(full[i].question);
    EXPECT_EQ(all[i].metrics.answer_nll, full[i].metrics.answer_nll);
    EXPECT_EQ(all[i].prediction, full[i].prediction);
    EXPECT_EQ(all[i].metrics.prefill_tokens, full[i].metrics.prefill_tokens);
    EXPECT_EQ(all[i].metrics.evidence_recall, 1.0);
    EXPECT_LE(two[i].metrics.prefill_tokens, full[i].metrics.prefill_tokens);
    EXPECT_TRUE(std::isfinite(two[i].metrics.answer_nll));
  }
}

// A template with a default system turn (as SmolLM2's): the turn opens every method's context
// once, before the history, and questions come without it. So full context, BM25 of every turn
// and MemArt retrieving every block read the same tokens at the same positions, but only
// MemArt keeps the system turn in memory: it prefills the question alone.
TEST_P(LocomoTextTest, DefaultSystemTurnOpensEveryContext) {
  const std::string system = "You are Tiny.";
  auto t = tokenizer::Tokenizer::Create(
      ByteTokenizer("{% if messages[0]['role'] != 'system' %}<|im_start|>system\n" + system +
                    "<|im_end|>\n{% endif %}" + kChatMl));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  tok_ = std::make_unique<tokenizer::Tokenizer>(std::move(*t));
  // <|im_start|> "system\n" + system <|im_end|> "\n", one token per byte between the markers.
  const double n_system = 1 + 7 + system.size() + 1 + 1;
  const LocomoConversation conv = SmallConversation();
  const RenderedConversation r = RenderConversation(conv);
  const double n_hist = static_cast<double>(r.turns.back().end + 1);

  LocomoSweep sweep;
  sweep.names = {"full", "bm25", "memart", "memart-heads-text"};
  sweep.bm25_k = {100};
  sweep.block_sizes = {8};
  sweep.top_k = {1000};
  sweep.retrieval_heads = {{0, 0}};
  auto methods = ExpandLocomoMethods(sweep);
  ASSERT_TRUE(methods.ok()) << methods.status().ToString();
  LocomoQaOptions o;
  o.answer_tokens = 4;
  std::map<std::string, std::vector<QaRecord>> rec;
  auto results = Run(conv, *methods, o, &rec);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  const std::vector<QaRecord>& full = rec["full"];
  const std::vector<QaRecord>& bm25 = rec["bm25/k100"];
  const std::vector<QaRecord>& memart = rec["memart/softmax-sum/bs8/k1000"];
  const std::vector<QaRecord>& as_text = rec["memart-heads-text/softmax-sum/bs8/k1000"];
  ASSERT_EQ(full.size(), 2u);
  ASSERT_EQ(as_text.size(), 2u);
  ASSERT_EQ(bm25.size(), 2u);
  ASSERT_EQ(memart.size(), 2u);
  for (size_t i = 0; i < full.size(); ++i) {
    SCOPED_TRACE(full[i].question);
    // The question's prompt, without the system turn: "<|im_start|>user\n" ... "assistant\n".
    const double n_prompt = memart[i].metrics.prefill_tokens;
    EXPECT_GT(n_prompt, static_cast<double>(full[i].question.size()));
    EXPECT_LT(n_prompt, full[i].question.size() + 100.0);
    EXPECT_EQ(full[i].metrics.prefill_tokens, n_system + n_hist + n_prompt);
    EXPECT_EQ(bm25[i].metrics.prefill_tokens, n_system + n_hist + n_prompt);
    EXPECT_EQ(bm25[i].metrics.answer_nll, full[i].metrics.answer_nll);
    EXPECT_EQ(bm25[i].prediction, full[i].prediction);
    // MemArt reads the same rows at the same positions, computed in another order.
    EXPECT_NEAR(memart[i].metrics.answer_nll, full[i].metrics.answer_nll,
                1e-3 * (1 + full[i].metrics.answer_nll));
    EXPECT_EQ(memart[i].metrics.evidence_recall, 1.0);
    // Every block read as text: the tokens of full context, prefilled the same way.
    EXPECT_EQ(as_text[i].metrics.prefill_tokens, n_system + n_hist + n_prompt);
    EXPECT_EQ(as_text[i].metrics.answer_nll, bm25[i].metrics.answer_nll);
    EXPECT_EQ(as_text[i].prediction, full[i].prediction);
    EXPECT_EQ(as_text[i].metrics.evidence_recall, 1.0);
  }
}

// An ingest window as long as the history writes it as full context prefills it: MemArt
// reading every block then answers as full context does. A window of one block writes other
// rows (each turn sees only the block before it), so the same reading answers differently.
// (Not on the tiny gemma3: its layers' own sliding window of 4 rows is shorter than a block.)
class LocomoIngestTest : public LocomoH2oTest {};

TEST_P(LocomoIngestTest, IngestWindowWritesTheHistoryOverASlidingWindow) {
  const LocomoConversation conv = SmallConversation();
  std::map<int, std::map<std::string, std::vector<QaRecord>>> rec;  // window -> method -> answers
  for (int window : {100000, 8}) {
    LocomoSweep sweep;
    sweep.names = {"full", "memart"};
    sweep.block_sizes = {8};
    sweep.top_k = {1000};
    sweep.ingest_window = window;  // a deviation: memart runs on MemArtMemory
    auto methods = ExpandLocomoMethods(sweep);
    ASSERT_TRUE(methods.ok()) << methods.status().ToString();
    EXPECT_TRUE(methods->back().policy.empty());
    LocomoQaOptions o;
    o.answer_tokens = 4;
    o.ingest_window = window;
    auto results = Run(conv, *methods, o, &rec[window]);
    ASSERT_TRUE(results.ok()) << results.status().ToString();
  }
  const std::vector<QaRecord>& full = rec[100000]["full"];
  const std::vector<QaRecord>& wide = rec[100000]["memart/softmax-sum/bs8/k1000"];
  const std::vector<QaRecord>& narrow = rec[8]["memart/softmax-sum/bs8/k1000"];
  ASSERT_EQ(full.size(), 2u);
  ASSERT_EQ(wide.size(), 2u);
  ASSERT_EQ(narrow.size(), 2u);
  bool narrow_moved = false;
  for (size_t i = 0; i < full.size(); ++i) {
    SCOPED_TRACE(full[i].question);
    EXPECT_NEAR(wide[i].metrics.answer_nll, full[i].metrics.answer_nll,
                1e-3 * (1 + full[i].metrics.answer_nll));
    EXPECT_EQ(wide[i].metrics.evidence_recall, 1.0);
    EXPECT_EQ(narrow[i].metrics.evidence_recall, 1.0);
    EXPECT_EQ(narrow[i].metrics.prefill_tokens, wide[i].metrics.prefill_tokens);
    narrow_moved |= std::abs(narrow[i].metrics.answer_nll - full[i].metrics.answer_nll) >
                    1e-2 * (1 + full[i].metrics.answer_nll);
  }
  EXPECT_TRUE(narrow_moved) << "a one-block ingest window changed no answer NLL";
}

INSTANTIATE_TEST_SUITE_P(Archs, LocomoIngestTest, ::testing::Values("llama", "qwen2"));

// The question's and the message content's tokens of a question prompt, decoded, are the
// question and the content (up to a leading space a word's token carries), and end before the
// prompt's last token; with one token per byte they are exactly their bytes. Checked on the real
// tokenizers where they are installed.
void CheckQuestionTokens(const tokenizer::Tokenizer& tok, bool one_token_per_byte) {
  auto tmpl = tokenizer::DetectChatTemplate(tok.chat_template(), tok.architecture());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  for (const std::string q :
       {"What did Ann buy?", "When did Caroline go to the LGBTQ support group?",
        "How many \"kids\" does Melanie have: 2 or 3?", "Qu'a-t-elle vu à Zürich?", "x",
        "When did Gina develop a video presentation? "}) {
    SCOPED_TRACE(q);
    auto p = BuildQuestionPrompt(*tmpl, tok, q);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    // Gemma's template trims a message's content; the question's ends in a space (as one of
    // LoCoMo's does) are not its tokens.
    const std::string question(tokenizer::TrimPythonWhitespace(q));
    const std::string content =
        "Based on the conversation above, answer the question in a few words.\nQuestion: " +
        question;
    for (const auto& [range, want] :
         {std::pair{p->question, question}, std::pair{p->content, content}}) {
      ASSERT_GE(range.begin, 0);
      ASSERT_LT(range.begin, range.end);
      ASSERT_LT(range.end, static_cast<int64_t>(p->tokens.size()));
      std::string text;
      for (int64_t i = range.begin; i < range.end; ++i) text += tok.TokenToPiece(p->tokens[i]);
      if (one_token_per_byte) {
        EXPECT_EQ(text, want);
      } else {
        EXPECT_EQ(text.substr(text.size() > want.size() ? text.size() - want.size() : 0), want);
        EXPECT_LE(text.size(), want.size() + 1);  // at most the leading space
      }
    }
    EXPECT_EQ(p->question.end, p->content.end);
    EXPECT_GT(p->question.begin, p->content.begin);
  }
  EXPECT_FALSE(BuildQuestionPrompt(*tmpl, tok, "").ok());
  EXPECT_FALSE(BuildQuestionPrompt(*tmpl, tok, " \n").ok());
}

TEST(QuestionPrompt, QuestionTokensOfOneTokenPerByte) {
  auto t = tokenizer::Tokenizer::Create(ByteTokenizer());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  CheckQuestionTokens(*t, true);
}

TEST(QuestionPrompt, QuestionTokensOfSmolLm2) {
  KVMEM_REQUIRE_SMOLLM2(tok);
  CheckQuestionTokens(*tok, false);
}

TEST(QuestionPrompt, QuestionTokensOfGemma3) {
  KVMEM_REQUIRE_GEMMA3(tok);
  CheckQuestionTokens(*tok, false);
}

// Question- and content-scored retrieval over every block read what prompt-scored retrieval
// reads: the same answers; over one block they run and find what they find.
TEST_P(LocomoTextTest, QuestionScoredRetrievalRuns) {
  LocomoSweep sweep;
  sweep.names = {"memart"};
  sweep.block_sizes = {8};
  sweep.top_k = {1000, 1};
  sweep.score_spans = {"prompt", "content", "question"};
  auto methods = ExpandLocomoMethods(sweep);
  ASSERT_TRUE(methods.ok()) << methods.status().ToString();
  ASSERT_EQ(methods->size(), 6u);
  std::map<std::string, std::vector<QaRecord>> rec;
  LocomoQaOptions o;
  o.answer_tokens = 4;
  auto results = Run(SmallConversation(), *methods, o, &rec);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  const std::vector<QaRecord>& all = rec["memart/softmax-sum/bs8/k1000"];
  ASSERT_EQ(all.size(), 2u);
  for (const char* span : {"/c", "/q"}) {
    SCOPED_TRACE(span);
    const std::vector<QaRecord>& same = rec[std::string("memart/softmax-sum/bs8/k1000") + span];
    ASSERT_EQ(same.size(), 2u);
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(same[i].metrics.answer_nll, all[i].metrics.answer_nll);
      EXPECT_EQ(same[i].prediction, all[i].prediction);
    }
    const std::vector<QaRecord>& one = rec[std::string("memart/softmax-sum/bs8/k1") + span];
    ASSERT_EQ(one.size(), 2u);
    for (const QaRecord& r : one) {
      EXPECT_GE(r.metrics.evidence_recall, 0.0);
      EXPECT_LE(r.metrics.evidence_recall, 1.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, LocomoTextTest, ::testing::Values("llama", "gemma3"));

}  // namespace
}  // namespace kvmem::eval
