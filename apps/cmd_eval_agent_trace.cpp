// `kvmem eval agent-trace`: multi-turn tool-use traces (docs/eval/agent-trace.md) replayed through
// the `intentkv` policy's scorers and layouts and the full cache (eval/agent_trace.h), at a budget
// C that is a share of each trace's final length. Prints one row per method (means over traces;
// worst case over traces for the peaks) and, with --json, one JSON object per (trace, method).
// Progress goes to stderr.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "common.h"
#include "eval/agent_trace.h"
#include "eval/metrics.h"
#include "eval/progress.h"

namespace kvmem::app {
namespace {

struct TraceOptions {
  std::string model;
  std::vector<std::string> traces;
  std::vector<std::string> methods = {"full",
                                      "intentkv",
                                      "query",
                                      "streaming",
                                      "snapkv",
                                      "h2o",
                                      "intentkv/compact",
                                      "streaming/compact",
                                      "snapkv/compact",
                                      "h2o/compact"};
  double budget_ratio = 0.25;
  int64_t budget = 0;
  int answer_tokens = 8;
  int threads = DefaultThreads();
  std::string json;
};

// "full", or "SCORER[/compact]" of the intentkv policy.
std::pair<std::string, nlohmann::json> MethodSpec(const std::string& m, int64_t budget) {
  if (m == "full") return {"full", nlohmann::json::object()};
  const size_t slash = m.find('/');
  nlohmann::json c = {{"budget", budget},
                      {"scorer", m.substr(0, slash)},
                      {"layout", slash == std::string::npos ? "dead_slot" : m.substr(slash + 1)}};
  return {"intentkv", c};
}

struct Totals {
  double hit = 0, nll = 0, kl = 0, evidence = 0, agree = 0, seconds = 0;
  int traces = 0, probes = 0;
  int64_t peak_rows = 0, peak_live = 0;
  double raw_reads = 0, eff_reads = 0;
};

Result<std::vector<std::string>> TraceFiles(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  for (const std::string& g : given) {
    if (std::filesystem::is_directory(g)) {
      for (const auto& e : std::filesystem::directory_iterator(g)) {
        if (e.path().extension() == ".json") out.push_back(e.path().string());
      }
    } else {
      out.push_back(g);
    }
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) return InvalidArgument("no trace files (--traces DIR or FILE...)");
  return out;
}

int Run(const TraceOptions& o) {
  if (o.budget_ratio <= 0 || o.budget_ratio > 1) {
    return Fail(InvalidArgument("--budget-ratio must lie in (0, 1]"));
  }
  auto files = TraceFiles(o.traces);
  if (!files.ok()) return Fail(files.status());
  auto mt = LoadModelAndTokenizer(o.model);
  if (!mt.ok()) return Fail(mt.status());
  const model::Model& model = *mt->model;
  const tokenizer::Tokenizer& tok = *mt->tok;
  auto tmpl = tokenizer::DetectChatTemplate(tok.chat_template(), tok.architecture());
  if (!tmpl.ok()) return Fail(tmpl.status());
  ThreadPool threads(o.threads);
  eval::EvalAgentOptions options;
  options.formats = {kv::KvFormat::kQ8_0, kv::KvFormat::kQ8_0};  // the server's default
  std::FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "w");
  if (!o.json.empty() && json == nullptr) return Fail(IoError("cannot write " + o.json));

  std::map<std::string, Totals> totals;
  eval::ProgressLine progress("kvmem eval agent-trace",
                              static_cast<int64_t>(files->size() * o.methods.size()), 0);
  int64_t done = 0;
  for (const std::string& file : *files) {
    auto trace = eval::LoadAgentTrace(file);
    if (!trace.ok()) return Fail(trace.status());
    auto last =
        eval::RenderTracePrompt(*tmpl, *trace, static_cast<int>(trace->turns.size()) - 1, "");
    if (!last.ok()) return Fail(last.status());
    const int64_t length = static_cast<int64_t>(tok.Encode(*last, true, true).size());
    const int64_t budget =
        o.budget > 0 ? o.budget : std::max<int64_t>(1, std::llround(o.budget_ratio * length));
    std::vector<eval::TraceProbeResult> reference;
    for (const std::string& m : o.methods) {
      const auto [policy, config] = MethodSpec(m, budget);
      auto run = eval::RunAgentTrace(
          model, tok, &threads, *tmpl, *trace, policy, config, options, o.answer_tokens,
          [&](int turn, int n) {
            progress.Steps(
                done, static_cast<int64_t>(files->size() * o.methods.size()),
                trace->id + " " + m + " turn " + std::to_string(turn) + "/" + std::to_string(n));
          });
      if (!run.ok()) return Fail(run.status().WithContext(trace->id + " " + m));
      ++done;
      if (m == "full") reference = run->probes;
      Totals& t = totals[m];
      int64_t prompt = 0, cached = 0, peak_rows = 0, peak_live = 0;
      double raw = 0, eff = 0;
      for (const eval::TraceRequest& r : run->requests) {
        prompt += r.prompt_rows;
        cached += r.cached_rows;
        peak_rows = std::max(peak_rows, r.prompt_rows);
        peak_live = std::max(peak_live, r.live_rows);
        raw += static_cast<double>(r.prompt_rows);
        eff += static_cast<double>(r.live_rows);
      }
      const double hit = prompt > 0 ? static_cast<double>(cached) / prompt : 0;
      double nll = 0, kl = 0, evidence = 0, agree = 0;
      for (size_t p = 0; p < run->probes.size(); ++p) {
        const eval::TraceProbeResult& r = run->probes[p];
        nll += r.nll;
        evidence += r.evidence_kept;
        if (p < reference.size()) {
          kl += eval::KlDivergence(reference[p].first_logits, r.first_logits);
          agree += reference[p].prediction == r.prediction ? 1 : 0;
        }
      }
      const double np = std::max<double>(1, static_cast<double>(run->probes.size()));
      t.hit += hit;
      t.nll += nll;
      t.kl += kl;
      t.evidence += evidence;
      t.agree += agree;
      t.probes += static_cast<int>(run->probes.size());
      t.traces += 1;
      t.seconds += run->seconds;
      t.peak_rows = std::max(t.peak_rows, peak_rows);
      t.peak_live = std::max(t.peak_live, peak_live);
      t.raw_reads += raw;
      t.eff_reads += eff;
      if (json != nullptr) {
        nlohmann::ordered_json j = {{"trace", trace->id},
                                    {"method", m},
                                    {"budget", budget},
                                    {"length", length},
                                    {"requests", run->requests.size()},
                                    {"prefix_hit", hit},
                                    {"peak_request_rows", peak_rows},
                                    {"peak_live_rows", peak_live},
                                    {"raw_kv_reads", raw},
                                    {"eff_kv_reads", eff},
                                    {"probe_nll", nll / np},
                                    {"probe_kl", kl / np},
                                    {"evidence_kept", evidence / np},
                                    {"greedy_agreement", agree / np},
                                    {"kv_peak_bytes", run->kv_peak_bytes},
                                    {"seconds", run->seconds}};
        std::fprintf(json, "%s\n", j.dump().c_str());
        std::fflush(json);
      }
    }
  }
  progress.Finish();
  if (json != nullptr) std::fclose(json);
  std::printf("%-18s %7s %9s %9s %9s %8s %8s %9s %10s %10s %8s\n", "method", "hit %", "peak req",
              "peak live", "NLL", "KL", "evid %", "agree %", "raw reads", "eff reads", "sec");
  for (const std::string& m : o.methods) {
    const Totals& t = totals[m];
    const double np = std::max(1, t.probes), nt = std::max(1, t.traces);
    std::printf("%-18s %7.1f %9lld %9lld %9.4f %8.4f %8.1f %9.1f %10.0f %10.0f %8.1f\n", m.c_str(),
                100 * t.hit / nt, static_cast<long long>(t.peak_rows),
                static_cast<long long>(t.peak_live), t.nll / np, t.kl / np, 100 * t.evidence / np,
                100 * t.agree / np, t.raw_reads, t.eff_reads, t.seconds);
  }
  return 0;
}

}  // namespace

void AddEvalAgentTraceCommand(CLI::App& eval) {
  auto o = std::make_shared<TraceOptions>();
  CLI::App* cmd = eval.add_subcommand(
      "agent-trace",
      "Tool-use traces through IntentKV, StreamingLLM, SnapKV and H2O (dead slots or compaction)");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  cmd->add_option("--traces", o->traces, "trace .json files or directories")->required();
  cmd->add_option("--methods", o->methods,
                  "full, or SCORER[/compact] with SCORER one of intentkv, query, streaming, "
                  "snapkv, h2o")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--budget-ratio", o->budget_ratio,
                  "C as a share of each trace's final prompt length")
      ->capture_default_str();
  cmd->add_option("--budget", o->budget, "C in rows (overrides --budget-ratio)");
  cmd->add_option("--answer-tokens", o->answer_tokens, "greedy answer length")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "threads")->capture_default_str();
  cmd->add_option("--json", o->json, "also write one JSON object per (trace, method) here");
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
