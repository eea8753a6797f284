// LoCoMo question answering over an agent's memory (`kvmem eval locomo`): each conversation is
// the history, fed turn by turn (speaker-labelled lines, each session opened by its date line);
// then every question (category 5 skipped: it has no gold answer) is asked after it, and the
// greedy answer is scored. full, h2o and memart run as agents of the memory-policy table
// (policy_qa.h: the turn code the server runs), the text baselines and MemArt's deviations
// here. Methods:
//   full    the whole history in the cache as plain context, truncated to its most recent
//           tokens where the model's window is smaller (result.truncated_tokens says how many);
//           prefill per question counts the kept history (what a plaintext agent re-reads).
//   memart  the history as MemArt memory blocks (memory/retrieval/memart.h), ingested turn by
//           turn with retrieval (or over a sliding window: ingest_window), then each question
//           retrieves per layer with the method's strategy and top_k; only the question is
//           prefilled.
//   bm25    the top-k turns by BM25 against the question, re-inserted as text in history order.
//   embed   the same with the top-k turns by cosine similarity of sentence embeddings
//           (all-MiniLM-L6-v2, memory/embed/) of the question and of each turn: Mem0-like
//           dense retrieval.
//   h2o     H2O (memory/eviction/h2o_policy.h) as the MemArt paper ran it: the whole history
//           (truncated to the window like full) and the question are prefilled, each row's
//           attention from every history and question token accumulated (the history's once),
//           then each (layer, KV head) keeps the question and `budget` history rows (half the
//           most recent, half the heaviest hitters) and the answer is decoded over that. The
//           default budget, 256 rows, is the decode KV of MemArt's default bs 16 x top_k 16
//           (plus the question, which both keep). Prefill per question counts the kept history
//           and the question, KV at decode the rows the lists hold, averaged over layers and
//           KV heads. The answer's own rows are not evicted (H2O evicts one row per generated
//           token; answers here are at most answer_tokens long).
// A chat template's default system turn (SmolLM2's) opens every method's context once, before
// the history, as it opens an agent's memory, and questions are rendered without it: full, h2o
// and the text baselines prefill it with each question, memart keeps it in memory, always read
// (keep_first grows by its length).
// Metrics per question: token F1 and BLEU-1 (qa_metrics.h), evidence recall (share of the
// question's evidence turns of which at least half the tokens are in the rows the answer reads:
// for memart averaged over layers, a turn counting in a layer when half its rows were
// retrieved there; for h2o likewise averaged over layers and KV heads, a turn counting in a
// (layer, KV head) when half its rows were kept there), answer NLL (mean per token,
// teacher-forced, of the gold answer after the prompt), prefill tokens, KV rows at decode,
// seconds, and for policies run after `full` the KL of the first answer token's distribution
// from full context's.
// Not thread-safe; the ThreadPool parallelizes inside the forward passes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "eval/evidence_heads.h"
#include "eval/locomo.h"
#include "kv/kv_format.h"
#include "memory/embed/sentence_encoder.h"
#include "memory/eviction/h2o.h"
#include "memory/policy/policy_table.h"
#include "memory/retrieval/memart.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::eval {

enum class LocomoMethodKind { kFull, kMemArt, kBm25, kEmbed, kH2O, kEpiCache };

// The prompt tokens whose queries score MemArt's blocks (MemArtMemory::BeginTurn's `scoring`):
// all of them (the paper's query), the user message's content (not the chat template's tokens
// around it), or the question alone (not the instruction before it either). The last two are
// deviations.
enum class ScoreSpan { kPrompt, kContent, kQuestion };

struct LocomoMethod {
  // e.g. "full", "memart/softmax-sum/bs16/k32", "memart/model", "bm25/k10", "embed/k10",
  // "h2o/b256"
  std::string name;
  LocomoMethodKind kind = LocomoMethodKind::kFull;
  // The agent memory policy and config the method runs (policy_qa.h: the server's turn code);
  // empty for the text baselines and for MemArt deviations the policy does not offer
  // (memart-coupled, memart-heads-text, turn-bounded or whole turns, -centre scores, an ingest
  // window, the head tally), which run on MemArtMemory directly.
  std::string policy;
  memory::Json config;
  memory::MemArtConfig memart;  // kMemArt
  // kMemArt, memart-heads-text (a diagnostic): the blocks the retrieval heads choose are read as
  // text, their tokens prefilled afresh before the question, instead of as their stored KV. The
  // same selection with KV computed in the context it is read in.
  bool blocks_as_text = false;
  ScoreSpan score_span = ScoreSpan::kPrompt;  // kMemArt
  int turns_k = 0;              // kBm25, kEmbed: turns re-inserted
  memory::H2oConfig h2o;        // kH2O
  // kEpiCache: the memory is rebuilt from the whole history (Rebuild: clustered anew, each
  // episode's cache block-prefilled) after the last turn, before the questions: the paper's
  // offline build. Without it the agent is as it lived the conversation (online).
  bool rebuild = false;
};

struct LocomoQaOptions {
  int answer_tokens = 24;  // greedy answer length limit (stops at a line break or end of turn)
  int limit = 0;           // questions per conversation (0: all)
  kv::KvFormats kv_formats;
  // Sentence encoder of the embed methods (required by them; must outlive the run).
  const memory::embed::SentenceEncoder* encoder = nullptr;
  // When set, the questions of the memart method named evidence_heads_method are tallied per
  // head (evidence_heads.h); must outlive the run.
  EvidenceHeads* evidence_heads = nullptr;
  std::string evidence_heads_method;
  // memart: 0 ingests the history with the first memart method's own retrieval (as an agent
  // that lived the conversation); W > 0 ingests each turn reading the last W history rows
  // instead (top_k 0, keep_last W: a sliding window, as a chunked prefill of a long text would),
  // and the questions then retrieve with each method's config.
  int ingest_window = 0;
  // Per-model presets of the memart policy (policy_qa.h).
  std::string model_fingerprint;
  std::string presets_dir;
  // Called after each ingested turn and each answered question: units done of total, and what.
  std::function<void(int64_t done, int64_t total, const std::string& what)> progress;
};

struct QaSums {
  int64_t n = 0;
  int64_t n_recall = 0;  // questions whose evidence names turns of the conversation
  double f1 = 0, bleu1 = 0, evidence_recall = 0, answer_nll = 0;
  double prefill_tokens = 0, kv_len_decode = 0, latency_s = 0;
  // Policies: tokens of greedy answers fed back (decode steps) and the seconds the answers took.
  double decode_tokens = 0, decode_seconds = 0;
  // Policies after `full` in the same run: KL(P_full || P_method) of the answer's first token.
  double kl_to_full = 0;
  int64_t n_kl = 0;
  void Add(const QaSums& o);
};

struct LocomoMethodResult {
  std::string method;
  QaSums overall;
  std::map<int, QaSums> by_category;
  int64_t truncated_tokens = 0;  // full, h2o: history tokens left out of the window, all convs
  double ingest_seconds = 0;     // full, memart, h2o: feeding the history
  double rebuild_seconds = 0;    // epicache: the offline build, all conversations
  size_t kv_peak_bytes = 0;      // policies: the agent pool's peak, largest over conversations
  int64_t history_tokens = 0;    // policies: the histories fed (system turn included), summed
};

// The methods a command line names: `names` from {full, memart, memart/model, memart/paper,
// memart-coupled, memart-heads, memart-heads-text, bm25, embed, h2o}; memart/model and
// memart/paper are the memart policy on that preset with memart_config over it, the question
// scoring (as the presets were evaluated); memart expands to every block size x strategy x top_k
// (memart-coupled likewise, with coupled positions; memart-heads with the retrieval heads, and
// memart-heads-text reading their blocks as text) and neighbors, bm25 and embed to every k of
// theirs, h2o to every budget. Names: "full", "memart/<strategy>/bs<BS>/k<K>" ("/nb<N>" added
// for neighbors N > 0, then "/turn" when turn-bounded, "/whole" when whole turns are read, then
// "/c" or "/q" when the message's
// content or the question alone scores), "memart-coupled/...", "memart-heads/...",
// "memart-heads-text/...", "bm25/k<K>", "embed/k<K>", "h2o/b<BUDGET>". InvalidArgument on an
// unknown name or empty sweep.
struct LocomoSweep {
  std::vector<std::string> names = {"full", "memart", "bm25"};
  std::vector<int> block_sizes = {16};
  std::vector<std::string> strategies = {"softmax-sum"};
  std::vector<int> top_k = {16};
  std::vector<int> bm25_k = {10};
  std::vector<int> embed_k = {10};
  // h2o: history rows kept per (layer, KV head); 256 = MemArt's default bs 16 x top_k 16.
  std::vector<int> h2o_budget = {256};
  // epicache and its baselines: M, the rows each KV head keeps per global layer (a sweep), the
  // block and the episodes.
  std::vector<int> epicache_budget = {2048};
  int epicache_block = 512;
  int episodes = 4;
  double regroup = 2.0;  // epicache-online: re-cluster at this growth (0: never)
  std::string positions = "kept";  // epicache and baselines: "kept" or "compact" rows
  int keep_first = 0;
  int keep_last = 0;
  // memart: adjacent blocks each chosen block brings (MemArtConfig::neighbors), a sweep.
  std::vector<int> neighbors = {0};
  // memart: 1 keeps the neighbours within the turns of the chosen block
  // (MemArtConfig::turn_bounded), a sweep of 0 and 1 (1 is skipped for neighbors 0).
  std::vector<int> turn_bounded = {0};
  // memart-heads: 1 reads the whole turns of the best blocks (MemArtConfig::whole_turns), a
  // sweep of 0 and 1 (1 is skipped with neighbours and for the per-layer methods).
  std::vector<int> whole_turns = {0};
  // memart-heads: the query heads that choose one block set for every layer.
  std::vector<memory::HeadRef> retrieval_heads;
  // memart: which prompt tokens score the blocks (ScoreSpan), a sweep of "prompt", "content"
  // and "question".
  std::vector<std::string> score_spans = {"prompt"};
  // memart/model and memart/paper: config fields over the preset (a JSON object).
  memory::Json memart_config = memory::Json::object();
  // Set when the run writes an ingest window or tallies heads (LocomoQaOptions): the memart
  // methods then run on MemArtMemory directly.
  int ingest_window = 0;
  bool head_tally = false;
};
Result<std::vector<LocomoMethod>> ExpandLocomoMethods(const LocomoSweep& sweep);

// The prompt of one question: the user turn "Based on the conversation above, answer the
// question in a few words.\nQuestion: <question>" rendered with `tmpl` and its generation prompt,
// tokenized (special tokens parsed); `content`: the message's content tokens in it, `question`:
// the question's own, both ending before the prompt's last token (a token straddling a text's
// first byte, as a word's leading space does, counts as the text's). Internal when the question
// is empty or the texts do not begin and end at token boundaries (up to such a straddling token).
struct QuestionPrompt {
  std::string text;  // rendered
  std::vector<int32_t> tokens;
  tokenizer::TokenSpan content, question;
  std::string content_text, question_text;  // as the tokens' ranges were found (trimmed)
};
Result<QuestionPrompt> BuildQuestionPrompt(const tokenizer::ChatTemplate& tmpl,
                                           const tokenizer::Tokenizer& tok,
                                           const std::string& question);

// One answered question, for progress and logs.
struct QaRecord {
  std::string method, conversation, question, gold, prediction;
  int category = 0;
  int episode = -1;  // the episode the question was routed to (epicache), else -1
  QaSums metrics;    // n = 1
};

using QaCallback = std::function<void(const QaRecord&)>;

// Runs the methods over the conversations. A method with a policy is an agent of that policy
// (policy_qa.h) per conversation: full and h2o are sent the history that fits the window as one
// prompt, then each question after it; memart is sent the history turn by turn (each joins its
// memory), then each question alone. The MemArt deviations that share a block size share one
// ingested history per conversation (ingested with the first such method's config, or with
// options.ingest_window).
Result<std::vector<LocomoMethodResult>> RunLocomoQa(
    const model::Model& model, const tokenizer::Tokenizer& tok, ThreadPool* pool,
    const std::vector<LocomoConversation>& convs, const std::vector<LocomoMethod>& methods,
    const LocomoQaOptions& options, const QaCallback& on_answer);

}  // namespace kvmem::eval
