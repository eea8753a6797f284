// `kvmem eval locomo`: question answering over LoCoMo conversations held as agent memory
// (eval/locomo_qa.h): full context, MemArt block retrieval, BM25 and embedding plaintext
// retrieval, and H2O heavy-hitter eviction at a decode KV budget, with F1, BLEU-1, evidence recall,
// answer NLL, prefill tokens, KV length at decode and latency per method, overall and per category.
// A markdown table on stdout, --json OUT for the plot script (scripts/plot_locomo.py), progress on
// stderr.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "common.h"
#include "core/memory_usage.h"
#include "eval/locomo.h"
#include "eval/locomo_qa.h"
#include "eval/progress.h"
#include "memory/embed/sentence_encoder.h"
#include "memory/store/agent_store.h"
#include "memory/store/fingerprint.h"

namespace kvmem::app {
namespace {

struct LocomoOptions {
  std::string model;
  std::vector<std::string> data;
  eval::LocomoSweep sweep;
  int limit = 0;
  bool concat = false;
  int conversations = 0;
  int answer_tokens = 24;
  int ingest_window = 0;  // eval::LocomoQaOptions::ingest_window
  int head_report = 0;    // > 0: the per-head evidence tally, top K (eval/evidence_heads.h)
  std::vector<std::string> retrieval_heads;  // memart-heads: "LAYER.HEAD" each
  std::string memart_config = "{}";          // memart/model, memart/paper
  std::string cache_type_k = "f16", cache_type_v = "f16";
  std::string json_out;
  std::string answers_out;  // JSON lines, one per answered question
  std::string embed_model;  // "": the installed all-MiniLM-L6-v2
  int threads = DefaultThreads();
};

nlohmann::ordered_json SumsJson(const eval::QaSums& s) {
  const double n = static_cast<double>(std::max<int64_t>(s.n, 1));
  const double nr = static_cast<double>(std::max<int64_t>(s.n_recall, 1));
  return {{"questions", s.n},
          {"f1", s.f1 / n},
          {"bleu1", s.bleu1 / n},
          {"evidence_recall", s.evidence_recall / nr},
          {"answer_nll", s.answer_nll / n},
          {"prefill_tokens_per_question", s.prefill_tokens / n},
          {"kv_len_decode", s.kv_len_decode / n},
          {"latency_s", s.latency_s / n},
          {"decode_tokens_per_s", s.decode_seconds > 0 ? s.decode_tokens / s.decode_seconds : 0.0},
          {"kl_to_full", s.n_kl > 0 ? nlohmann::json(s.kl_to_full / static_cast<double>(s.n_kl))
                                    : nlohmann::json(nullptr)}};
}

void PrintTable(const std::vector<eval::LocomoMethodResult>& results) {
  std::printf(
      "| method | questions | F1 | BLEU-1 | evidence recall | answer NLL | prefill tok/q | "
      "KV at decode | latency s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : results) {
    const nlohmann::ordered_json j = SumsJson(r.overall);
    std::printf("| %s | %lld | %.3f | %.3f | %.3f | %.3f | %.0f | %.0f | %.2f |\n",
                r.method.c_str(), static_cast<long long>(r.overall.n), j["f1"].get<double>(),
                j["bleu1"].get<double>(), j["evidence_recall"].get<double>(),
                j["answer_nll"].get<double>(), j["prefill_tokens_per_question"].get<double>(),
                j["kv_len_decode"].get<double>(), j["latency_s"].get<double>());
  }
  std::printf(
      "\nF1 / answer NLL per category (1 multi-hop, 2 temporal, 3 open-domain, 4 "
      "single-hop):\n\n| method | 1 | 2 | 3 | 4 |\n|---|---|---|---|---|\n");
  for (const auto& r : results) {
    std::printf("| %s |", r.method.c_str());
    for (int c = 1; c <= 4; ++c) {
      auto it = r.by_category.find(c);
      if (it == r.by_category.end()) {
        std::printf(" - |");
      } else {
        const nlohmann::ordered_json j = SumsJson(it->second);
        std::printf(" %.3f / %.2f |", j["f1"].get<double>(), j["answer_nll"].get<double>());
      }
    }
    std::printf("\n");
  }
  for (const auto& r : results) {
    if (r.truncated_tokens > 0) {
      std::printf(
          "\n%s: the window held only the most recent history; %lld history tokens were "
          "left out over all conversations.\n",
          r.method.c_str(), static_cast<long long>(r.truncated_tokens));
    }
  }
}

int Run(LocomoOptions o) {
  if (o.limit < 0 || o.conversations < 0 || o.answer_tokens <= 0) {
    return Fail(InvalidArgument("--limit and --conversations must be >= 0, --answer-tokens > 0"));
  }
  for (const std::string& s : o.retrieval_heads) {
    auto h = memory::ParseHeadRef(s);
    if (!h.ok()) return Fail(h.status().WithContext("--retrieval-heads"));
    o.sweep.retrieval_heads.push_back(*h);
  }
  o.sweep.ingest_window = o.ingest_window;
  o.sweep.head_tally = o.head_report > 0;
  o.sweep.memart_config = memory::Json::parse(o.memart_config, nullptr, false);
  if (o.sweep.memart_config.is_discarded() || !o.sweep.memart_config.is_object()) {
    return Fail(InvalidArgument("--memart-config must be a JSON object"));
  }
  auto methods = eval::ExpandLocomoMethods(o.sweep);
  if (!methods.ok()) return Fail(methods.status());
  auto convs = eval::LoadLocomoData(o.data);
  if (!convs.ok()) return Fail(convs.status());
  if (o.conversations > 0 && static_cast<int>(convs->size()) > o.conversations) {
    convs->resize(o.conversations);
  }
  if (o.concat) *convs = {eval::ConcatConversations(*convs, o.limit)};
  auto mt = LoadModelAndTokenizer(o.model);
  if (!mt.ok()) return Fail(mt.status());
  const model::Model& model = *mt->model;
  eval::LocomoQaOptions qo;
  // The memart policy's per-model presets: shipped, or calibrated into the default store.
  auto fingerprint =
      memory::store::ModelFingerprint(o.model.empty() ? DefaultModelPath() : o.model);
  if (!fingerprint.ok()) return Fail(fingerprint.status());
  qo.model_fingerprint = *fingerprint;
  if (auto root = memory::store::DefaultStoreRoot(); root.ok()) qo.presets_dir = *root + "/presets";
  qo.answer_tokens = o.answer_tokens;
  qo.ingest_window = o.ingest_window;
  qo.limit = o.concat ? 0 : o.limit;  // --concat applied it per source conversation
  auto fk = kv::ParseKvFormat(o.cache_type_k);
  if (!fk.ok()) return Fail(fk.status().WithContext("--ctk"));
  auto fv = kv::ParseKvFormat(o.cache_type_v);
  if (!fv.ok()) return Fail(fv.status().WithContext("--ctv"));
  qo.kv_formats = {*fk, *fv};
  Status fmt = kv::CheckKvFormats(qo.kv_formats, model.spec().head_dim_k, model.spec().head_dim_v);
  if (!fmt.ok()) return Fail(fmt);
  std::optional<memory::embed::SentenceEncoder> encoder;
  if (std::any_of(methods->begin(), methods->end(), [](const eval::LocomoMethod& m) {
        return m.kind == eval::LocomoMethodKind::kEmbed ||
               (m.kind == eval::LocomoMethodKind::kEpiCache && m.config["scoring"] == "episode");
      })) {
    const std::string path = o.embed_model.empty() ? DefaultEmbedModel() : o.embed_model;
    auto enc = memory::embed::SentenceEncoder::Load(path);
    if (!enc.ok()) {
      return Fail(enc.status().WithContext(
          "--embed-model (install one with scripts/install_deps.sh --model minilm)"));
    }
    encoder.emplace(std::move(*enc));
    qo.encoder = &*encoder;
  }
  std::optional<eval::EvidenceHeads> heads;
  if (o.head_report > 0) {
    auto first = std::find_if(methods->begin(), methods->end(), [](const eval::LocomoMethod& m) {
      return m.kind == eval::LocomoMethodKind::kMemArt && m.policy.empty();
    });
    if (first == methods->end()) {
      return Fail(InvalidArgument("--head-report needs a memart sweep method (--methods memart)"));
    }
    heads.emplace(model.spec().n_layers, model.spec().n_heads, o.head_report);
    qo.evidence_heads = &*heads;
    qo.evidence_heads_method = first->name;
  }
  eval::ProgressLine progress("kvmem eval locomo", 0, 0);
  qo.progress = [&](int64_t done, int64_t total, const std::string& what) {
    progress.Steps(done, total, what);
  };
  std::ofstream answers;
  eval::QaCallback on_answer;
  if (!o.answers_out.empty()) {
    answers.open(o.answers_out);
    if (!answers) return Fail(IoError("cannot write " + o.answers_out));
    // index: the question's place among the conversation's asked ones (as --limit counts).
    on_answer = [&answers, asked = std::map<std::string, int>()](const eval::QaRecord& r) mutable {
      const int index = asked[r.method + "\n" + r.conversation]++;
      nlohmann::ordered_json j = {{"method", r.method},    {"conversation", r.conversation},
                                  {"index", index},        {"question", r.question},
                                  {"gold", r.gold},        {"prediction", r.prediction},
                                  {"category", r.category}};
      const nlohmann::ordered_json m = SumsJson(r.metrics);
      for (auto it = m.begin(); it != m.end(); ++it) {
        if (it.key() != "questions") j[it.key()] = it.value();
      }
      // No recall for a question whose evidence names no turn of its conversation.
      if (r.metrics.n_recall == 0) j["evidence_recall"] = nullptr;
      if (r.episode >= 0) j["episode"] = r.episode;
      answers << j.dump() << "\n";
    };
  }
  ThreadPool threads(o.threads);
  auto results = eval::RunLocomoQa(model, *mt->tok, &threads, *convs, *methods, qo, on_answer);
  progress.Finish();
  if (!results.ok()) return Fail(results.status());
  if (answers.is_open() && !answers.flush()) return Fail(IoError("cannot write " + o.answers_out));
  PrintTable(*results);
  if (heads) std::printf("\n%s: %s", qo.evidence_heads_method.c_str(), heads->Markdown(10).c_str());
  if (!o.json_out.empty()) {
    nlohmann::ordered_json j;
    j["model"] = model.spec().name.empty() ? o.model : model.spec().name;
    j["conversations"] = nlohmann::json::array();
    for (const auto& c : *convs) j["conversations"].push_back(c.id);
    j["kv_format"] = o.cache_type_k + "/" + o.cache_type_v;
    j["ingest_window"] = o.ingest_window;
    j["peak_rss_bytes"] = ReadProcessMemory().peak_rss;
    for (const auto& r : *results) {
      nlohmann::ordered_json m = SumsJson(r.overall);
      m["by_category"] = nlohmann::ordered_json::object();
      for (const auto& [cat, s] : r.by_category)
        m["by_category"][std::to_string(cat)] = SumsJson(s);
      m["truncated_history_tokens"] = r.truncated_tokens;
      m["ingest_seconds"] = r.ingest_seconds;
      if (r.rebuild_seconds > 0) m["rebuild_seconds"] = r.rebuild_seconds;
      if (r.kv_peak_bytes > 0) m["kv_peak_bytes"] = r.kv_peak_bytes;
      if (r.history_tokens > 0) m["history_tokens"] = r.history_tokens;
      j["methods"][r.method] = m;
    }
    if (heads) {
      nlohmann::ordered_json e;
      e["method"] = qo.evidence_heads_method;
      e["top_k"] = heads->top_k();
      e["questions"] = heads->n_questions();
      e["turns"] = heads->n_turns();
      e["chance"] = heads->chance();
      e["heads"] = nlohmann::json::array();
      for (const eval::EvidenceHeads::Head& h : heads->Ranked()) {
        e["heads"].push_back({{"layer", h.layer}, {"head", h.head}, {"hit_rate", h.hit_rate}});
      }
      j["evidence_heads"] = e;
    }
    std::ofstream f(o.json_out);
    f << j.dump(2) << "\n";
    if (!f) return Fail(IoError("cannot write " + o.json_out));
  }
  std::fprintf(stderr, "kvmem eval locomo: %zu methods, %zu conversations, %.0f s\n",
               methods->size(), convs->size(), progress.Seconds());
  return 0;
}

}  // namespace

void AddEvalLocomoCommand(CLI::App& eval) {
  auto o = std::make_shared<LocomoOptions>();
  CLI::App* cmd = eval.add_subcommand(
      "locomo",
      "LoCoMo QA over agent memory: full context, MemArt retrieval, BM25 and embedding turns, "
      "H2O eviction");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  cmd->add_option("--data", o->data,
                  "LoCoMo .json files or directories (default: $KVMEM_DATA/locomo, else "
                  "../shared/data/locomo)");
  cmd->add_option("--methods", o->sweep.names,
                  "full, memart (a sweep of --k, --bs, --strategies, ...), memart/model and "
                  "memart/paper (the memart policy on that preset, --memart-config over it), "
                  "memart-coupled, memart-heads, memart-heads-text (the heads' blocks read as "
                  "text: a diagnostic), bm25, embed, h2o, epicache (offline build), "
                  "epicache-uniform (uniform layer budgets), epicache-online (as lived, "
                  "regrouping, uniform budgets), and block-prefill baselines streamingllm, snapkv, keydiff, "
                  "infinipot (a sweep of --budget); full, h2o, memart and epicache run as the "
                  "server's agent policies")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--memart-config", o->memart_config,
                  "memart/model, memart/paper: config fields over the preset (JSON object, "
                  "GET /v1/policies lists them)")
      ->capture_default_str();
  cmd->add_option("--k", o->sweep.top_k, "MemArt blocks retrieved per layer (a sweep)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--bs", o->sweep.block_sizes, "MemArt block sizes: 8, 16, 32")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--strategies", o->sweep.strategies,
                  "MemArt scoring: softmax-sum, softmax-max, rr-sum, rr-max (Eq. 3); each with "
                  "-centre: blocks scored by their box centre (a deviation, docs/eval/memart.md); "
                  "-exact: by the exact max of q.k over their keys (a ceiling for the box)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--keep-first", o->sweep.keep_first, "MemArt: history tokens always read first")
      ->capture_default_str();
  cmd->add_option("--keep-last", o->sweep.keep_last, "MemArt: latest history tokens always read")
      ->capture_default_str();
  cmd->add_option("--ingest-window", o->ingest_window,
                  "MemArt: 0 ingests the history with the first memart method's retrieval; W > 0 "
                  "ingests each turn over the last W history rows (a sliding window)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--retrieval-heads", o->retrieval_heads,
                  "memart-heads: LAYER.HEAD query heads that choose one block set for every layer "
                  "(a deviation; find them with --head-report on other conversations)")
      ->delimiter(',');
  cmd->add_option("--neighbors", o->sweep.neighbors,
                  "MemArt: adjacent blocks on either side each block chosen by score brings, "
                  "within --k (a deviation, so a found block's turn is read; a sweep)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--turn-bounded", o->sweep.turn_bounded,
                  "MemArt: 1 keeps the neighbours within the turns the chosen block overlaps (a "
                  "deviation: the rest of a found turn is read, not the turns beside it); a sweep "
                  "of 0,1")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--whole-turns", o->sweep.whole_turns,
                  "memart-heads: 1 reads the whole turns of the best blocks, as many as fit in "
                  "--k blocks' rows (a deviation: no block fragments; with --neighbors 0); a "
                  "sweep of 0,1")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--score-span", o->sweep.score_spans,
                  "MemArt: the prompt tokens whose queries score the blocks: prompt (all, the "
                  "paper's query), content (the user message's, not the chat template's) or "
                  "question (its own, not the instruction before it either); a sweep")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--bm25-k", o->sweep.bm25_k, "BM25: turns re-inserted (a sweep)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--embed-k", o->sweep.embed_k, "embed: turns re-inserted (a sweep)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--budget", o->sweep.epicache_budget,
                  "epicache and its baselines: M, rows each KV head keeps per global layer (a "
                  "sweep)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--block", o->sweep.epicache_block,
                  "epicache and its baselines: M_block, tokens prefilled between compressions")
      ->capture_default_str();
  cmd->add_option("--episodes", o->sweep.episodes, "epicache: E, episodes")->capture_default_str();
  cmd->add_option("--regroup", o->sweep.regroup,
                  "epicache-online: re-cluster once the history grew this many times (0: never)")
      ->capture_default_str();
  cmd->add_option("--positions", o->sweep.positions,
                  "epicache and its baselines: kept rows keep their positions until the context "
                  "runs out (kept) or are always re-placed at compact ones (compact; the method "
                  "names get /compact)")
      ->check(CLI::IsMember({"kept", "compact"}))
      ->capture_default_str();
  cmd->add_option("--h2o-budget", o->sweep.h2o_budget,
                  "H2O: history rows kept per layer and KV head, half recent, half heavy hitters "
                  "(a sweep; the question is kept too). Default 256: the decode KV of MemArt's "
                  "default --bs 16 x --k 16")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--head-report", o->head_report,
                  "K > 0: per (layer, head), the share of evidence turns with a block among the "
                  "head's top K by exact q.k, for the first memart method (diagnostic)")
      ->capture_default_str();
  cmd->add_option("--embed-model", o->embed_model,
                  "embed: sentence-transformers model directory (default: the installed "
                  "all-MiniLM-L6-v2)");
  cmd->add_option("--limit", o->limit, "questions per conversation (0: all)")
      ->capture_default_str();
  cmd->add_flag("--concat", o->concat,
                "one history of all the conversations in order (sessions renumbered), then the "
                "questions of each (--limit per conversation): a history longer than the window");
  cmd->add_option("--conversations", o->conversations, "first N conversations (0: all)")
      ->capture_default_str();
  cmd->add_option("--answer-tokens", o->answer_tokens, "greedy answer length limit")
      ->capture_default_str();
  cmd->add_option("--ctk,--cache-type-k", o->cache_type_k, "K format: f16, q8_0, q4_0")
      ->capture_default_str();
  cmd->add_option("--ctv,--cache-type-v", o->cache_type_v, "V format: f16, q8_0, q4_0")
      ->capture_default_str();
  cmd->add_option("--json", o->json_out, "write the results as JSON to this file");
  cmd->add_option("--answers", o->answers_out,
                  "write every answered question (method, gold, prediction, metrics) to this "
                  "file as JSON lines, for paired comparisons (scripts/locomo_paired.py)");
  cmd->add_option("-t,--threads", o->threads, "threads")->capture_default_str();
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
