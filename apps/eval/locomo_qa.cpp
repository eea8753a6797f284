#include "eval/locomo_qa.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "core/clock.h"
#include "engine/forward.h"
#include "engine/generate.h"
#include "eval/bm25.h"
#include "eval/metrics.h"
#include "eval/policy_qa.h"
#include "eval/qa_metrics.h"
#include "memory/eviction/attention_scores.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/token_span.h"

namespace kvmem::eval {

void QaSums::Add(const QaSums& o) {
  n += o.n;
  n_recall += o.n_recall;
  f1 += o.f1;
  bleu1 += o.bleu1;
  evidence_recall += o.evidence_recall;
  answer_nll += o.answer_nll;
  prefill_tokens += o.prefill_tokens;
  kv_len_decode += o.kv_len_decode;
  latency_s += o.latency_s;
  decode_tokens += o.decode_tokens;
  decode_seconds += o.decode_seconds;
  kl_to_full += o.kl_to_full;
  n_kl += o.n_kl;
}

namespace {

using Clock = std::chrono::steady_clock;

// The history as the agent receives it: one piece per turn (its session's date line first when
// it opens a session), tokenized piece by piece, so every method sees the same tokens. The chat
// template's system turn, when it has one (SmolLM2's default system prompt), comes before it in
// every method's context, as it opens an agent's memory; offsets here leave it out.
struct History {
  std::vector<int32_t> system;               // the system turn's tokens (with BOS), or none
  std::vector<std::string> text;             // (n_turns)
  std::vector<std::vector<int32_t>> tokens;  // (n_turns)
  std::vector<int64_t> first;                // (n_turns + 1) token offsets
  std::map<std::string, size_t> turn_of;     // dia_id -> turn
  std::vector<int32_t> all;
};

History BuildHistory(const LocomoConversation& c, const tokenizer::Tokenizer& tok,
                     const std::string& system) {
  const RenderedConversation r = RenderConversation(c);
  History h;
  if (!system.empty()) h.system = tok.Encode(system, /*add_special=*/true, /*parse_special=*/true);
  size_t prev = 0;
  h.first.push_back(0);
  for (const TurnSpan& t : r.turns) {
    const size_t end = std::min(r.text.size(), t.end + 1);  // with the line break
    h.text.push_back(r.text.substr(prev, end - prev));
    h.tokens.push_back(tok.Encode(h.text.back(), /*add_special=*/prev == 0 && system.empty()));
    h.all.insert(h.all.end(), h.tokens.back().begin(), h.tokens.back().end());
    h.first.push_back(static_cast<int64_t>(h.all.size()));
    h.turn_of[t.dia_id] = h.text.size() - 1;
    prev = end;
  }
  return h;
}

// Turns the question's evidence names, when the conversation has them.
std::vector<size_t> EvidenceTurns(const LocomoQa& qa, const History& h) {
  std::vector<size_t> turns;
  for (const std::string& id : qa.evidence) {
    auto it = h.turn_of.find(id);
    if (it != h.turn_of.end()) turns.push_back(it->second);
  }
  return turns;
}

// Share of the evidence turns whose rows pass `half_read` (a turn's share of rows read >= 1/2,
// or a graded share for memart's per-layer vote).
template <typename TurnShare>
void AddRecall(const std::vector<size_t>& turns, TurnShare share, QaSums* m) {
  if (turns.empty()) return;
  double sum = 0;
  for (size_t t : turns) sum += share(t);
  m->n_recall = 1;
  m->evidence_recall = sum / static_cast<double>(turns.size());
}

struct Answer {
  double nll = 0;
  std::string prediction;
  double kv_len = 0;      // rows the sequence stores at the end of decode
  double kv_visible = 0;  // rows its (layer, KV head) lists hold then, averaged over them
  double seconds = 0;     // generation only
  int episode = -1;       // the episode the question was routed to (epicache), else -1
};

// seq holds the context and the prompt but its last token, the next token going at position
// seq->n_rows() + pos_offset. Scores the gold answer teacher-forced, then answers greedily;
// seq is left as it was.
Result<Answer> AnswerOn(const model::Model& model, const tokenizer::Tokenizer& tok,
                        ThreadPool* pool, kv::KvSequence* seq, int64_t pos_offset,
                        int32_t last_prompt_token, const std::vector<int32_t>& gold,
                        int answer_tokens) {
  Answer a;
  const int64_t keep = seq->n_rows();
  if (!gold.empty()) {
    std::vector<int32_t> forced = {last_prompt_token};
    forced.insert(forced.end(), gold.begin(), gold.end() - 1);
    std::vector<float> logits;
    KVMEM_RETURN_IF_ERROR(engine::Forward(model, pool, seq, forced, keep + pos_offset,
                                          /*all_logits=*/true, &logits));
    const size_t vocab = logits.size() / forced.size();
    for (size_t i = 0; i < gold.size(); ++i) {
      a.nll += NegLogLikelihood(std::span(logits).subspan(i * vocab, vocab), gold[i]);
    }
    a.nll /= static_cast<double>(gold.size());
    seq->Truncate(keep);
  }
  engine::GenerateParams gp;
  gp.max_new_tokens = answer_tokens;
  gp.sampler.temperature = 0;
  gp.position_offset = pos_offset;
  std::vector<int32_t> out, hist;
  std::string text;
  engine::GenerateStats stats;
  const auto t0 = Clock::now();
  const int32_t first[1] = {last_prompt_token};
  KVMEM_RETURN_IF_ERROR(engine::Generate(
      model, pool, seq, first, gp, [&](int32_t t) { return tok.IsEndOfGeneration(t); },
      [&](int32_t t) {
        out.push_back(t);
        text += tok.TokenToPiece(t);
        return text.find('\n') == std::string::npos;
      },
      &hist, &stats));
  a.seconds = SecondsSince(t0);
  a.kv_len = static_cast<double>(seq->n_rows());
  const kv::KvView& view = seq->view();
  for (int l = 0; l < view.n_layers(); ++l) {
    for (int g = 0; g < view.n_kv_heads(); ++g) {
      a.kv_visible += static_cast<double>(view.n_rows(l, g));
    }
  }
  a.kv_visible /= static_cast<double>(view.n_layers()) * view.n_kv_heads();
  seq->Truncate(keep);
  text = text.substr(0, text.find('\n'));
  a.prediction = std::string(tokenizer::TrimPythonWhitespace(text));
  return a;
}

class Runner {
 public:
  Runner(const model::Model& model, const tokenizer::Tokenizer& tok, ThreadPool* pool,
         const LocomoQaOptions& o, const QaCallback& on_answer)
      : model_(model), tok_(tok), pool_(pool), o_(o), on_answer_(on_answer) {}

  Status Init() {
    auto tmpl = tokenizer::DetectChatTemplate(tok_.chat_template(), model_.spec().arch_name);
    if (!tmpl.ok()) return tmpl.status().WithContext("locomo: chat template");
    // The system turn the template adds before a question on its own (SmolLM2's default system
    // prompt) goes once before the history; questions are rendered without it.
    tmpl_ = *tmpl;
    tokenizer::ChatTemplate bare = tmpl_;
    bare.default_system_prompt.clear();
    const tokenizer::ChatMessage probe{"user", "?"};
    auto with = tokenizer::RenderChat(tmpl_, std::span(&probe, 1), true);
    auto without = tokenizer::RenderChat(bare, std::span(&probe, 1), true);
    if (!with.ok() || !without.ok() || !with->ends_with(*without)) {
      return Internal("locomo: the chat template's system turn is not a prefix of its prompts");
    }
    system_ = with->substr(0, with->size() - without->size());
    tmpl_ = bare;
    return Status::Ok();
  }

  void set_total(int64_t total) { total_ = total; }

  Status Conversation(const LocomoConversation& c, const std::vector<LocomoMethod>& methods,
                      std::vector<LocomoMethodResult>* results) {
    conv_ = &c;
    hist_ = BuildHistory(c, tok_, system_);
    bm25_.reset();
    turn_embeddings_.clear();
    questions_.clear();
    full_first_.clear();
    for (const LocomoQa& qa : c.qa) {
      if (qa.category == 5 || qa.answer.empty()) continue;
      if (o_.limit > 0 && static_cast<int>(questions_.size()) >= o_.limit) break;
      Question q;
      q.qa = &qa;
      auto prompt = BuildQuestionPrompt(tmpl_, tok_, qa.question);
      if (!prompt.ok()) return prompt.status();
      q.text = std::move(prompt->text);
      q.content_text = std::move(prompt->content_text);
      q.question_text = std::move(prompt->question_text);
      q.prompt = std::move(prompt->tokens);
      q.content_tokens = prompt->content;
      q.question_tokens = prompt->question;
      q.gold = tok_.Encode(qa.answer, /*add_special=*/false);
      q.evidence = EvidenceTurns(qa, hist_);
      questions_.push_back(std::move(q));
    }
    // Per block size; the pools outlive the memories whose sequences hold their blocks.
    std::map<int, std::unique_ptr<kv::KvPool>> memart_pools;
    std::map<int, std::unique_ptr<memory::MemArtMemory>> memart;
    for (size_t i = 0; i < methods.size(); ++i) {
      const LocomoMethod& m = methods[i];
      LocomoMethodResult& r = (*results)[i];
      if (!m.policy.empty()) {
        KVMEM_RETURN_IF_ERROR(Policy(m, &r));
      } else if (m.kind == LocomoMethodKind::kBm25) {
        if (!bm25_) bm25_ = std::make_unique<Bm25Index>(hist_.text);
        KVMEM_RETURN_IF_ERROR(TextRetrieval(
            m, [&](const Question& q) { return bm25_->TopK(q.qa->question, m.turns_k); }, &r));
      } else if (m.kind == LocomoMethodKind::kEmbed) {
        KVMEM_RETURN_IF_ERROR(Embed(m, &r));
      } else if (m.kind == LocomoMethodKind::kMemArt) {
        const int bs = m.memart.block_size;
        if (!memart.count(bs)) {
          const auto t0 = Clock::now();
          // The pool holds the history and the working rows of the largest retrieval of any
          // method that reads this history.
          int64_t retrieved = 0;
          for (const LocomoMethod& o : methods) {
            if (o.kind != LocomoMethodKind::kMemArt || !o.policy.empty() ||
                o.memart.block_size != bs) {
              continue;
            }
            retrieved = std::max(retrieved, int64_t{o.memart.top_k} * bs + o.memart.keep_first +
                                                o.memart.keep_last + 2 * bs +
                                                static_cast<int64_t>(hist_.system.size()));
          }
          // A window longer than the history reads the history.
          const int64_t window =
              std::min(int64_t{o_.ingest_window}, static_cast<int64_t>(hist_.all.size()));
          retrieved = std::max(retrieved, window + m.memart.keep_first + 2 * bs +
                                              static_cast<int64_t>(hist_.system.size()));
          auto mem = Ingest(m, retrieved, &memart_pools[bs]);
          if (!mem.ok()) return mem.status();
          memart[bs] = std::move(*mem);
          r.ingest_seconds += SecondsSince(t0);
        }
        KVMEM_RETURN_IF_ERROR(MemArt(m, memart[bs].get(), &r));
      } else {
        return Internal("locomo: method '" + m.name + "' has no policy");
      }
    }
    return Status::Ok();
  }

 private:
  struct Question {
    const LocomoQa* qa = nullptr;
    std::string text, content_text, question_text;  // the prompt rendered; its focus spans
    std::vector<int32_t> prompt, gold;
    tokenizer::TokenSpan content_tokens;   // the user message's content in the prompt
    tokenizer::TokenSpan question_tokens;  // the question's own tokens in it
    std::vector<size_t> evidence;
  };

  std::unique_ptr<kv::KvPool> MakePool(int64_t rows) const {
    const int block_rows = 256;
    return std::make_unique<kv::KvPool>(model_.kv_geometry(block_rows),
                                        static_cast<int>(rows / block_rows + 4), o_.kv_formats);
  }

  void Tick(const std::string& what) {
    ++done_;
    if (o_.progress) o_.progress(done_, total_, what);
  }

  void Record(const LocomoMethod& m, const Question& q, const Answer& a, QaSums metrics,
              LocomoMethodResult* r) {
    metrics.n = 1;
    metrics.f1 = TokenF1(a.prediction, q.qa->answer);
    metrics.bleu1 = Bleu1(a.prediction, q.qa->answer);
    metrics.answer_nll = a.nll;
    metrics.kv_len_decode = a.kv_len;
    r->overall.Add(metrics);
    r->by_category[q.qa->category].Add(metrics);
    if (on_answer_) {
      on_answer_({m.name, conv_->id, q.qa->question, q.qa->answer, a.prediction, q.qa->category,
                  a.episode, metrics});
    }
    Tick(m.name);
  }

  // The history a full-context client sends: from token h0 on, leaving room in the model's
  // window for the longest question and its answer.
  int64_t WindowStart() const {
    size_t longest = 0;
    for (const Question& q : questions_)
      longest = std::max(longest, q.prompt.size() + q.gold.size());
    const int64_t window = model_.spec().n_ctx_train;
    const int64_t room = window - static_cast<int64_t>(longest) - o_.answer_tokens - 8 -
                         static_cast<int64_t>(hist_.system.size());
    const int64_t n = static_cast<int64_t>(hist_.all.size());
    return std::max<int64_t>(0, n - std::max<int64_t>(room, 0));
  }

  // Share of turn t's tokens (all of them, truncated ones included) among `rows`: rows of a
  // window's context by storage index (the system turn's, then history tokens h0..), sorted.
  double TurnShare(size_t t, int64_t h0, const std::vector<int64_t>& rows) const {
    const int64_t len = hist_.first[t + 1] - hist_.first[t];
    if (len <= 0) return 0.0;
    const auto sys = static_cast<int64_t>(hist_.system.size());
    const int64_t a0 = std::max(hist_.first[t], h0) - h0 + sys;
    const int64_t a1 = hist_.first[t + 1] - h0 + sys;
    if (a1 <= a0) return 0.0;
    const auto lo = std::lower_bound(rows.begin(), rows.end(), a0);
    const auto hi = std::lower_bound(lo, rows.end(), a1);
    return static_cast<double>(hi - lo) / static_cast<double>(len);
  }

  // Method m as an agent of its policy, asked every question. A policy whose memory is a cache
  // of the prompt (full, h2o) is sent the history that fits the window as one prompt, and each
  // question after it (as a client resending the conversation); one whose history is more than
  // a context (memart) is sent the history turn by turn, and each question alone.
  Status Policy(const LocomoMethod& m, LocomoMethodResult* r) {
    const auto sys = static_cast<int64_t>(hist_.system.size());
    EvalAgentOptions ao;
    ao.formats = o_.kv_formats;
    ao.max_history_tokens =
        sys + static_cast<int64_t>(hist_.all.size()) + 2 * model_.spec().n_ctx_train + 1024;
    ao.model_fingerprint = o_.model_fingerprint;
    ao.presets_dir = o_.presets_dir;
    ao.encoder = o_.encoder;
    memory::Json config = m.config;
    if (m.kind == LocomoMethodKind::kMemArt || m.kind == LocomoMethodKind::kEpiCache) {
      // The system turn (the first rows of the history) is always read.
      config["keep_first"] = config.value("keep_first", 0) + sys;
    }
    KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<EvalAgent> agent,
                           EvalAgent::Create(model_, tok_, pool_, m.policy, config, ao));
    const bool windowed = agent->spec().kind->rebuildable_from_prompt;
    const int64_t h0 = windowed ? WindowStart() : 0;
    std::string context;  // what precedes each question in its prompt
    const auto t0 = Clock::now();
    if (windowed) {
      context = system_;
      for (auto it = hist_.all.begin() + h0; it != hist_.all.end(); ++it) {
        context += tok_.TokenToPiece(*it);
      }
      KVMEM_RETURN_IF_ERROR(agent->Ingest(context).status());
      r->truncated_tokens += h0;
    } else {
      if (!system_.empty()) KVMEM_RETURN_IF_ERROR(agent->Ingest(system_).status());
      for (const std::string& turn : hist_.text) {
        KVMEM_RETURN_IF_ERROR(agent->Ingest(turn).status());
        Tick(m.name + " ingest");
      }
    }
    r->ingest_seconds += SecondsSince(t0);
    if (m.rebuild) {
      const auto t1 = Clock::now();
      KVMEM_RETURN_IF_ERROR(agent->policy().Rebuild().status());
      r->rebuild_seconds += SecondsSince(t1);
    }
    for (const Question& q : questions_) {
      const std::string& focus = m.score_span == ScoreSpan::kQuestion  ? q.question_text
                                 : m.score_span == ScoreSpan::kContent ? q.content_text
                                                                       : std::string();
      KVMEM_ASSIGN_OR_RETURN(Asked a,
                             agent->Ask(context + q.text, focus, q.gold, o_.answer_tokens));
      Answer ans;
      ans.nll = a.nll;
      ans.prediction = std::string(tokenizer::TrimPythonWhitespace(a.prediction));
      ans.kv_len = a.report.value("kv_len_decode", 0.0) + static_cast<double>(a.decoded);
      ans.episode = a.report.value("episode", -1);
      QaSums mt;
      // A cache of the prompt re-reads its history (what a plaintext agent pays); else only
      // the question is computed.
      mt.prefill_tokens = windowed ? static_cast<double>(a.account.prompt_tokens)
                                   : a.report.value("prefill_tokens", 0.0);
      mt.latency_s = a.prefill_seconds + a.answer_seconds;
      mt.decode_tokens = static_cast<double>(a.decoded);
      mt.decode_seconds = a.answer_seconds;
      const size_t qi = static_cast<size_t>(&q - questions_.data());
      if (m.kind == LocomoMethodKind::kFull) {
        full_first_[qi] = std::move(a.first_logits);
      } else if (auto it = full_first_.find(qi); it != full_first_.end()) {
        mt.kl_to_full = KlDivergence(it->second, a.first_logits);
        mt.n_kl = 1;
      }
      AddRecall(
          q.evidence, [&](size_t t) { return Recall(t, h0, a.detail); }, &mt);
      Record(m, q, ans, mt, r);
    }
    r->kv_peak_bytes = std::max(r->kv_peak_bytes, agent->kv_peak_bytes());
    r->history_tokens += sys + static_cast<int64_t>(hist_.all.size());
    return Status::Ok();
  }

  // Evidence recall of turn t in what a policy's answer read (EvalAgent's Detail): per layer
  // (rows_read) or per (layer, KV head) list (kept), the share of them where at least half the
  // turn's rows were read; without a detail, whether half the turn is in the window.
  double Recall(size_t t, int64_t h0, const memory::Json& detail) const {
    const memory::Json* lists = nullptr;
    if (detail.is_object() && detail.contains("rows_read")) lists = &detail["rows_read"];
    if (detail.is_object() && detail.contains("kept")) lists = &detail["kept"];
    if (lists == nullptr) {
      const int64_t a0 = std::max(hist_.first[t], h0), a1 = hist_.first[t + 1];
      const int64_t len = hist_.first[t + 1] - hist_.first[t];
      return len > 0 && 2 * std::max<int64_t>(0, a1 - a0) >= len ? 1.0 : 0.0;
    }
    double hits = 0;
    std::vector<int64_t> rows;
    for (const memory::Json& flat : *lists) {
      rows.clear();
      for (size_t k = 0; k + 1 < flat.size(); k += 2) {
        for (int64_t i = flat[k].get<int64_t>(); i < flat[k + 1].get<int64_t>(); ++i) {
          rows.push_back(i);
        }
      }
      hits += TurnShare(t, h0, rows) >= 0.5 ? 1.0 : 0.0;
    }
    return lists->empty() ? 0.0 : hits / static_cast<double>(lists->size());
  }

  // Dense retrieval: cosine similarity (dot product of unit vectors) between the question's
  // and each turn's embedding; ties go to the earlier turn.
  Status Embed(const LocomoMethod& m, LocomoMethodResult* r) {
    const memory::embed::SentenceEncoder* enc = o_.encoder;
    if (enc == nullptr) return InvalidArgument("the embed method needs a sentence encoder");
    const size_t dim = static_cast<size_t>(enc->dim());
    if (turn_embeddings_.empty()) turn_embeddings_ = enc->Embed(hist_.text, pool_);
    std::vector<std::string> questions;
    for (const Question& q : questions_) questions.push_back(q.qa->question);
    const std::vector<float> qe = enc->Embed(questions, pool_);
    return TextRetrieval(
        m,
        [&](const Question& q) {
          const float* e = qe.data() + dim * static_cast<size_t>(&q - questions_.data());
          std::vector<std::pair<float, size_t>> scored(hist_.text.size());
          for (size_t t = 0; t < scored.size(); ++t) {
            const float* te = turn_embeddings_.data() + dim * t;
            float dot = 0;
            for (size_t d = 0; d < dim; ++d) dot += e[d] * te[d];
            scored[t] = {-dot, t};
          }
          const size_t k = std::min(scored.size(), static_cast<size_t>(m.turns_k));
          std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(k),
                            scored.end());
          std::vector<size_t> turns;
          for (size_t i = 0; i < k; ++i) turns.push_back(scored[i].second);
          return turns;
        },
        r);
  }

  // Prefills `context` and the question's prompt but its last token into the emptied `seq`
  // (from position 0; prefill time added to *prefill_s), then answers.
  Result<Answer> PrefillAndAnswer(std::vector<int32_t> context, const Question& q,
                                  kv::KvSequence* seq, double* prefill_s) {
    context.insert(context.end(), q.prompt.begin(), q.prompt.end() - 1);
    seq->Clear();
    std::vector<float> logits;
    const auto t0 = Clock::now();
    KVMEM_RETURN_IF_ERROR(engine::Forward(model_, pool_, seq, context, 0, false, &logits));
    *prefill_s += SecondsSince(t0);
    return AnswerOn(model_, tok_, pool_, seq, 0, q.prompt.back(), q.gold, o_.answer_tokens);
  }

  // The plaintext baselines: the turns `top_k(question)` names, re-inserted as text in history
  // order before the question, all prefilled.
  template <typename TopK>
  Status TextRetrieval(const LocomoMethod& m, TopK top_k, LocomoMethodResult* r) {
    size_t longest = 0;
    for (const auto& t : hist_.tokens) longest = std::max(longest, t.size());
    auto pool = MakePool(static_cast<int64_t>(longest) * m.turns_k + 1024);
    kv::KvSequence seq(pool.get());
    // AnswerOn scores the gold answer past the prompt, then goes back to decode from the prompt:
    // sliding-window layers must keep the rows that going back needs.
    seq.set_window_release(false);
    for (const Question& q : questions_) {
      std::vector<size_t> turns = top_k(q);
      std::sort(turns.begin(), turns.end());  // history order
      std::vector<int32_t> input = hist_.system;
      for (size_t t : turns) {
        // BOS opens the text once, as it opens the history (whose first turn carries it).
        const std::vector<int32_t>& turn = hist_.tokens[t];
        if (input.empty() && tok_.add_bos() && (turn.empty() || turn[0] != tok_.bos_id())) {
          input.push_back(tok_.bos_id());
        }
        input.insert(input.end(), hist_.tokens[t].begin(), hist_.tokens[t].end());
      }
      double prefill_s = 0;
      auto a = PrefillAndAnswer(input, q, &seq, &prefill_s);
      if (!a.ok()) return a.status();
      QaSums mt;
      mt.prefill_tokens = static_cast<double>(input.size() + q.prompt.size());
      mt.latency_s = prefill_s + a->seconds;
      AddRecall(
          q.evidence,
          [&](size_t t) { return std::binary_search(turns.begin(), turns.end(), t) ? 1.0 : 0.0; },
          &mt);
      Record(m, q, *a, mt, r);
    }
    return Status::Ok();
  }

  // The history of method m, in a pool with room for `retrieved` working rows besides it.
  Result<std::unique_ptr<memory::MemArtMemory>> Ingest(const LocomoMethod& m, int64_t retrieved,
                                                       std::unique_ptr<kv::KvPool>* pool) {
    *pool =
        MakePool(static_cast<int64_t>(hist_.system.size() + hist_.all.size()) + retrieved + 1024);
    memory::MemArtConfig c = ConfigOf(m);
    if (o_.ingest_window > 0) {
      c.top_k = 0;
      c.keep_last = o_.ingest_window;
      c.neighbors = 0;
      c.retrieval_heads.clear();
    }
    auto mem = memory::MemArtMemory::Create(model_, pool->get(), c);
    if (!mem.ok()) return mem.status();
    if (!hist_.system.empty()) {
      KVMEM_RETURN_IF_ERROR((*mem)->BeginTurn(hist_.system, pool_, nullptr));
      KVMEM_RETURN_IF_ERROR((*mem)->EndTurn(true));
    }
    for (size_t t = 0; t < hist_.tokens.size(); ++t) {
      KVMEM_RETURN_IF_ERROR((*mem)->BeginTurn(hist_.tokens[t], pool_, nullptr));
      KVMEM_RETURN_IF_ERROR((*mem)->EndTurn(true));
      Tick("memart bs" + std::to_string(m.memart.block_size) + " ingest");
    }
    return mem;
  }

  // Method m's MemArt config, the system turn (the first rows of the history) always read.
  memory::MemArtConfig ConfigOf(const LocomoMethod& m) const {
    memory::MemArtConfig c = m.memart;
    c.keep_first += static_cast<int>(hist_.system.size());
    return c;
  }

  Status MemArt(const LocomoMethod& m, memory::MemArtMemory* mem, LocomoMethodResult* r) {
    KVMEM_RETURN_IF_ERROR(mem->Reconfigure(ConfigOf(m)));
    const int bs = m.memart.block_size;
    const auto sys = static_cast<int64_t>(hist_.system.size());
    const bool tally = o_.evidence_heads != nullptr && m.name == o_.evidence_heads_method;
    std::vector<float> keys, scores;
    std::unique_ptr<kv::KvPool> text_pool;  // blocks_as_text
    for (const Question& q : questions_) {
      memory::RetrievalReport rep;
      std::vector<BlockSpan> evidence;  // the evidence turns' blocks, for the head tally
      for (size_t t : tally ? q.evidence : std::vector<size_t>{}) {
        if (hist_.first[t + 1] > hist_.first[t])
          evidence.push_back({(sys + hist_.first[t]) / bs, (sys + hist_.first[t + 1] - 1) / bs});
      }
      // The tokens that score: all of the prompt's but its last, the message content's, or the
      // question's.
      const tokenizer::TokenSpan scoring = m.score_span == ScoreSpan::kQuestion ? q.question_tokens
                                           : m.score_span == ScoreSpan::kContent
                                               ? q.content_tokens
                                               : tokenizer::TokenSpan{};
      if (!evidence.empty()) {
        const model::ModelSpec& s = model_.spec();
        mem->set_query_observer([&](int layer, std::span<const float> raw_q, int n) {
          mem->RawKeys(layer, &keys);
          const int64_t t0 = scoring.begin, t1 = scoring.end < 0 ? n : scoring.end;
          n = static_cast<int>(t1 - t0);
          memory::BlockExactScores(keys, s.n_kv_heads, s.head_dim_k, bs,
                                   raw_q.data() + t0 * s.q_dim(), n, s.n_heads, s.attn_scale(),
                                   pool_, &scores);
          o_.evidence_heads->AddLayer(layer, scores, n, mem->n_blocks(), evidence);
        });
      }
      const auto t1 = Clock::now();
      Status begun =
          mem->BeginTurn(std::span(q.prompt).first(q.prompt.size() - 1), pool_, &rep, scoring);
      mem->set_query_observer(nullptr);
      KVMEM_RETURN_IF_ERROR(begun);
      if (!evidence.empty()) o_.evidence_heads->EndQuestion(evidence, mem->n_blocks());
      double prefill_s = SecondsSince(t1);
      Result<Answer> a = Internal("unanswered");
      QaSums mt;
      mt.prefill_tokens = static_cast<double>(q.prompt.size());
      if (m.blocks_as_text) {
        KVMEM_RETURN_IF_ERROR(mem->EndTurn(false));
        // Every layer read the same rows: their tokens, then the question, prefilled.
        // BOS opens the text, as in TextRetrieval, when the first row read is not the first.
        std::vector<int32_t> input;
        const std::vector<int32_t>& first = sys > 0 ? hist_.system : hist_.all;
        if (tok_.add_bos() && !first.empty() && first[0] == tok_.bos_id() &&
            rep.rows.front().front().begin != 0) {
          input.push_back(tok_.bos_id());
        }
        for (const memory::RowSpan& s : rep.rows.front()) {
          for (int64_t i = s.begin; i < s.end; ++i)
            input.push_back(i < sys ? hist_.system[i] : hist_.all[i - sys]);
        }
        if (!text_pool) text_pool = MakePool(rep.retrieved_rows + 4096);
        kv::KvSequence seq(text_pool.get());
        seq.set_window_release(false);  // as in TextRetrieval: AnswerOn goes back to the prompt
        a = PrefillAndAnswer(input, q, &seq, &prefill_s);
        mt.prefill_tokens = static_cast<double>(input.size() + q.prompt.size());
      } else {
        kv::KvSequence* work = mem->working();
        a = AnswerOn(model_, tok_, pool_, work, mem->next_position() - work->n_rows(),
                     q.prompt.back(), q.gold, o_.answer_tokens);
        KVMEM_RETURN_IF_ERROR(mem->EndTurn(false));
      }
      if (!a.ok()) return a.status();
      mt.latency_s = prefill_s + a->seconds;
      AddRecall(
          q.evidence,
          [&](size_t t) {
            const int64_t a0 = sys + hist_.first[t], a1 = sys + hist_.first[t + 1];
            if (a1 <= a0) return 0.0;
            double layers = 0;
            for (const std::vector<memory::RowSpan>& rows : rep.rows) {
              int64_t read = 0;
              for (const memory::RowSpan& s : rows) {
                read += std::max<int64_t>(0, std::min(a1, s.end) - std::max(a0, s.begin));
              }
              layers += 2 * read >= a1 - a0 ? 1.0 : 0.0;
            }
            return layers / static_cast<double>(rep.rows.size());
          },
          &mt);
      Record(m, q, *a, mt, r);
    }
    return Status::Ok();
  }

  const model::Model& model_;
  const tokenizer::Tokenizer& tok_;
  ThreadPool* pool_;
  const LocomoQaOptions& o_;
  const QaCallback& on_answer_;
  tokenizer::ChatTemplate tmpl_;  // without a default system turn
  std::string system_;            // the template's default system turn, rendered, or empty
  const LocomoConversation* conv_ = nullptr;
  // Question index -> full context's first-token logits (this conversation's `full` method).
  std::map<size_t, std::vector<float>> full_first_;
  History hist_;
  std::unique_ptr<Bm25Index> bm25_;     // of the conversation's turns, built on first use
  std::vector<float> turn_embeddings_;  // (turns, encoder dim), computed on first use
  std::vector<Question> questions_;
  int64_t done_ = 0, total_ = 0;
};

}  // namespace

Result<QuestionPrompt> BuildQuestionPrompt(const tokenizer::ChatTemplate& tmpl,
                                           const tokenizer::Tokenizer& tok,
                                           const std::string& question) {
  if (tokenizer::TrimPythonWhitespace(question).empty()) {
    return Internal("locomo: an empty question");
  }
  const tokenizer::ChatMessage msg{
      "user", "Based on the conversation above, answer the question in a few words.\nQuestion: " +
                  question};
  auto text = tokenizer::RenderChat(tmpl, std::span(&msg, 1), /*add_generation_prompt=*/true);
  if (!text.ok()) return text.status();
  QuestionPrompt p;
  p.text = *text;
  p.tokens = tok.Encode(*text, /*add_special=*/false, /*parse_special=*/true);
  // The tokens of `part`, the last place it is in the text; trimmed, as some templates (Gemma's)
  // write a message's content.
  const auto range_of = [&](std::string_view untrimmed) -> Result<tokenizer::TokenSpan> {
    const std::string part(tokenizer::TrimPythonWhitespace(untrimmed));
    auto span = tokenizer::FindTokenSpan(tok, *text, p.tokens, part);
    if (!span.ok()) {
      return Internal("locomo: '" + part + "' in its prompt: " + span.status().message());
    }
    // The last prompt token is decoded from, not prefilled: the part must end before it.
    if (span->begin >= span->end || span->end >= static_cast<int64_t>(p.tokens.size())) {
      return Internal("locomo: the tokens of '" + part + "' are not inside its prompt");
    }
    return tokenizer::TokenSpan{span->begin, span->end};
  };
  KVMEM_ASSIGN_OR_RETURN(p.content, range_of(msg.content));
  KVMEM_ASSIGN_OR_RETURN(p.question, range_of(question));
  p.content_text = std::string(tokenizer::TrimPythonWhitespace(msg.content));
  p.question_text = std::string(tokenizer::TrimPythonWhitespace(question));
  return p;
}

namespace {

// The epicache policy's `scoring` a method name runs, or null: EpiCache (offline, its uniform
// layer budgets, online) and the paper's block-prefill baselines.
const char* EpiCacheScoring(const std::string& name) {
  if (name == "epicache" || name == "epicache-uniform" || name == "epicache-online") {
    return "episode";
  }
  if (name == "streamingllm") return "recency";
  if (name == "snapkv") return "window";
  if (name == "keydiff") return "keydiff";
  if (name == "infinipot") return "generic";
  return nullptr;
}

}  // namespace

Result<std::vector<LocomoMethod>> ExpandLocomoMethods(const LocomoSweep& sweep) {
  std::vector<LocomoMethod> out;
  if (sweep.names.empty()) return InvalidArgument("--methods: none given");
  for (const std::string& name : sweep.names) {
    if (name == "full") {
      LocomoMethod m;
      m.name = "full";
      m.policy = "full";
      m.config = memory::Json::object();
      out.push_back(std::move(m));
    } else if (name == "memart/model" || name == "memart/paper") {
      LocomoMethod m;
      m.name = name;
      m.kind = LocomoMethodKind::kMemArt;
      m.policy = "memart";
      m.config = sweep.memart_config;
      m.config["preset"] = name.substr(name.find('/') + 1);
      m.score_span = ScoreSpan::kQuestion;
      out.push_back(std::move(m));
    } else if (name == "bm25" || name == "embed") {
      const bool bm25 = name == "bm25";
      const std::vector<int>& ks = bm25 ? sweep.bm25_k : sweep.embed_k;
      const std::string flag = "--" + name + "-k";
      if (ks.empty()) return InvalidArgument(flag + ": none given");
      for (int k : ks) {
        if (k <= 0) return InvalidArgument(flag + ": " + std::to_string(k) + " is not positive");
        LocomoMethod m;
        m.name = name + "/k" + std::to_string(k);
        m.kind = bm25 ? LocomoMethodKind::kBm25 : LocomoMethodKind::kEmbed;
        m.turns_k = k;
        out.push_back(std::move(m));
      }
    } else if (name == "h2o") {
      if (sweep.h2o_budget.empty()) return InvalidArgument("--h2o-budget: none given");
      for (int b : sweep.h2o_budget) {
        if (b <= 0)
          return InvalidArgument("--h2o-budget: " + std::to_string(b) + " is not positive");
        LocomoMethod m;
        m.name = "h2o/b" + std::to_string(b);
        m.kind = LocomoMethodKind::kH2O;
        m.h2o.budget = b;
        m.policy = "h2o";
        m.config = {{"budget", b}, {"recent_ratio", m.h2o.recent_ratio}};
        out.push_back(std::move(m));
      }
    } else if (EpiCacheScoring(name) != nullptr) {
      if (sweep.epicache_budget.empty()) return InvalidArgument("--budget: none given");
      for (int b : sweep.epicache_budget) {
        if (b < 16) return InvalidArgument("--budget: " + std::to_string(b) + " is below 16");
        LocomoMethod m;
        m.name = name + "/M" + std::to_string(b) +
                 (sweep.positions == "compact" ? "/compact" : "");
        m.kind = LocomoMethodKind::kEpiCache;
        m.policy = "epicache";
        m.config = {{"budget", b},
                    {"block", sweep.epicache_block},
                    {"episodes", sweep.episodes},
                    {"scoring", EpiCacheScoring(name)},
                    {"layer_budgets", name == "epicache" ? "sensitivity" : "uniform"},
                    {"regroup", name == "epicache-online" ? sweep.regroup : 0.0},
                    {"positions", sweep.positions}};
        m.rebuild = name == "epicache" || name == "epicache-uniform";
        m.score_span = ScoreSpan::kQuestion;  // the question routes to an episode
        out.push_back(std::move(m));
      }
    } else if (name == "memart" || name == "memart-coupled" || name == "memart-heads" ||
               name == "memart-heads-text") {
      const bool heads = name == "memart-heads" || name == "memart-heads-text";
      if (sweep.block_sizes.empty() || sweep.strategies.empty() || sweep.top_k.empty() ||
          sweep.neighbors.empty() || sweep.turn_bounded.empty() || sweep.whole_turns.empty()) {
        return InvalidArgument(
            "--bs, --strategies, --k, --neighbors, --turn-bounded and --whole-turns need at least "
            "one value each");
      }
      if (heads && sweep.retrieval_heads.empty()) {
        return InvalidArgument(name + " needs --retrieval-heads");
      }
      // (neighbours, turn-bounded, whole turns, score span) variants; bounding no neighbours
      // changes nothing, and whole turns need retrieval heads and no neighbours.
      struct Variant {
        int nb = 0;
        bool turn_bounded = false;
        bool whole_turns = false;
        ScoreSpan span = ScoreSpan::kPrompt;
      };
      std::vector<Variant> variants;
      const std::map<std::string, ScoreSpan> span_names = {{"prompt", ScoreSpan::kPrompt},
                                                           {"content", ScoreSpan::kContent},
                                                           {"question", ScoreSpan::kQuestion}};
      std::vector<ScoreSpan> spans;
      for (const std::string& span : sweep.score_spans) {
        auto it = span_names.find(span);
        if (it == span_names.end()) {
          return InvalidArgument("--score-span: '" + span + "' (prompt, content or question)");
        }
        spans.push_back(it->second);
      }
      if (spans.empty()) return InvalidArgument("--score-span: none given");
      for (int nb : sweep.neighbors) {
        for (int tb : sweep.turn_bounded) {
          if (tb != 0 && tb != 1) {
            return InvalidArgument("--turn-bounded: " + std::to_string(tb) + " (0 or 1)");
          }
          if (tb == 1 && nb == 0) continue;
          for (int whole : sweep.whole_turns) {
            if (whole != 0 && whole != 1) {
              return InvalidArgument("--whole-turns: " + std::to_string(whole) + " (0 or 1)");
            }
            if (whole == 1 && (nb > 0 || !heads)) continue;
            for (const ScoreSpan span : spans) variants.push_back({nb, tb == 1, whole == 1, span});
          }
        }
      }
      for (int bs : sweep.block_sizes) {
        for (const std::string& st : sweep.strategies) {
          auto strategy = memory::ParseStrategy(st);
          if (!strategy.ok()) return strategy.status();
          for (int k : sweep.top_k) {
            for (const Variant& v : variants) {
              memory::MemArtConfig c;
              c.block_size = bs;
              c.top_k = k;
              c.strategy = *strategy;
              c.keep_first = sweep.keep_first;
              c.keep_last = sweep.keep_last;
              c.coupled_positions = name == "memart-coupled";
              if (heads) c.retrieval_heads = sweep.retrieval_heads;
              c.neighbors = v.nb;
              c.turn_bounded = v.turn_bounded;
              c.whole_turns = v.whole_turns;
              KVMEM_RETURN_IF_ERROR(memory::ValidateMemArtConfig(c));
              LocomoMethod m;
              m.name = name + "/" + st + "/bs" + std::to_string(bs) + "/k" + std::to_string(k) +
                       (v.nb > 0 ? "/nb" + std::to_string(v.nb) : "") +
                       (v.turn_bounded ? "/turn" : "") + (v.whole_turns ? "/whole" : "") +
                       (v.span == ScoreSpan::kContent    ? "/c"
                        : v.span == ScoreSpan::kQuestion ? "/q"
                                                         : "");
              m.kind = LocomoMethodKind::kMemArt;
              m.memart = c;
              m.blocks_as_text = name == "memart-heads-text";
              m.score_span = v.span;
              // What the memart policy offers runs through it; the deviations it does not
              // (docs/eval/memart.md: no gain measured) run on MemArtMemory here.
              if (!c.coupled_positions && !m.blocks_as_text && !c.turn_bounded && !c.whole_turns &&
                  strategy->block_score != memory::BlockScore::kCentre &&
                  sweep.ingest_window == 0 && !sweep.head_tally) {
                m.policy = "memart";
                m.config = {{"preset", "paper"},
                            {"block_size", bs},
                            {"top_k", k},
                            {"strategy", st},
                            {"keep_first", c.keep_first},
                            {"keep_last", c.keep_last},
                            {"neighbors", v.nb},
                            {"heads", memory::Json::array()}};
                for (const memory::HeadRef& h : c.retrieval_heads) {
                  m.config["heads"].push_back(memory::HeadRefName(h));
                }
              }
              out.push_back(std::move(m));
            }
          }
        }
      }
    } else {
      return InvalidArgument("unknown method '" + name +
                             "' (full, memart, memart/model, memart/paper, memart-coupled, "
                             "memart-heads, memart-heads-text, bm25, embed, h2o)");
    }
  }
  return out;
}

Result<std::vector<LocomoMethodResult>> RunLocomoQa(
    const model::Model& model, const tokenizer::Tokenizer& tok, ThreadPool* pool,
    const std::vector<LocomoConversation>& convs, const std::vector<LocomoMethod>& methods,
    const LocomoQaOptions& options, const QaCallback& on_answer) {
  for (const LocomoMethod& m : methods) {
    const bool tallied =
        options.evidence_heads != nullptr && m.name == options.evidence_heads_method;
    if (m.kind == LocomoMethodKind::kMemArt && !m.policy.empty() &&
        (options.ingest_window > 0 || tallied)) {
      return InvalidArgument("locomo: " + m.name + " runs as the memart policy, which offers no " +
                             (tallied ? "head tally" : "ingest window") +
                             " (LocomoSweep::head_tally, ingest_window)");
    }
  }
  std::vector<LocomoMethodResult> results(methods.size());
  for (size_t i = 0; i < methods.size(); ++i) results[i].method = methods[i].name;
  Runner runner(model, tok, pool, options, on_answer);
  KVMEM_RETURN_IF_ERROR(runner.Init());
  int64_t total = 0;
  for (const LocomoConversation& c : convs) {
    int64_t n_q = 0;
    for (const LocomoQa& qa : c.qa) n_q += qa.category != 5 && !qa.answer.empty() ? 1 : 0;
    if (options.limit > 0) n_q = std::min<int64_t>(n_q, options.limit);
    int64_t turns = 0;
    for (const LocomoSession& s : c.sessions) turns += static_cast<int64_t>(s.turns.size());
    // Ingested turn by turn: each memart policy method and epicache method, and each block size
    // of the other memart ones.
    std::map<int, bool> bs;
    int64_t ingests = 0;
    for (const LocomoMethod& m : methods) {
      if (m.kind == LocomoMethodKind::kEpiCache) ++ingests;
      if (m.kind != LocomoMethodKind::kMemArt) continue;
      if (m.policy.empty()) {
        bs[m.memart.block_size] = true;
      } else {
        ++ingests;
      }
    }
    ingests += static_cast<int64_t>(bs.size());
    total += n_q * static_cast<int64_t>(methods.size()) + turns * ingests;
  }
  runner.set_total(total);
  for (const LocomoConversation& c : convs) {
    KVMEM_RETURN_IF_ERROR(runner.Conversation(c, methods, &results).WithContext(c.id));
  }
  return results;
}

}  // namespace kvmem::eval
