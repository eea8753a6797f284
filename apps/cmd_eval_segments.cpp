// `kvmem eval segments`: KEEP against full recomputation, prefix caching, full reuse and
// CacheBlend on text worlds (eval/segments_eval.h; worlds from scripts/gen_textworld.py). Each
// measured (world, step, method) is a JSON line on stdout; progress and the summary per method
// go to stderr.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "common.h"
#include "eval/segments_eval.h"

namespace kvmem::app {
namespace {

struct SegmentsOptions {
  std::string model;
  std::string worlds;
  std::string embed_model;
  eval::SegmentsEvalOptions eval;
  int threads = DefaultThreads();
};

struct Sums {
  int n = 0, agree = 0;
  double ttft = 0, prefilled = 0, nll = 0, kl = 0, share = 0;
};

int Run(SegmentsOptions& o) {
  auto worlds = eval::ReadTextWorlds(o.worlds);
  if (!worlds.ok()) return Fail(worlds.status());
  auto mt = LoadModelAndTokenizer(o.model);
  if (!mt.ok()) return Fail(mt.status());
  auto tmpl = tokenizer::DetectChatTemplate(mt->tok->chat_template(), mt->tok->architecture());
  if (!tmpl.ok()) return Fail(tmpl.status());
  std::optional<memory::embed::SentenceEncoder> encoder;
  const std::string embed = o.embed_model.empty() ? DefaultEmbedModel() : o.embed_model;
  if (auto e = memory::embed::SentenceEncoder::Load(embed); e.ok()) {
    encoder.emplace(std::move(*e));
  } else if (!o.embed_model.empty()) {
    return Fail(e.status());
  }
  ThreadPool threads(o.threads);
  std::map<std::string, Sums> sums;
  int64_t rows = 0;
  Status st = eval::RunSegmentsEval(
      *mt->model, *mt->tok, *tmpl, encoder ? &*encoder : nullptr, &threads, *worlds, o.eval,
      [&](const nlohmann::ordered_json& r) {
        std::printf("%s\n", r.dump().c_str());
        std::fflush(stdout);
        ++rows;
        std::fprintf(stderr, "\rkvmem eval segments: %s step %d %-10s ttft %7.0f ms   ",
                     r["world"].get<std::string>().c_str(), r["step"].get<int>(),
                     r["method"].get<std::string>().c_str(), r["ttft_ms"].get<double>());
        if (r["step"].get<int>() == 0) return;  // step 0 builds every cache
        Sums& s = sums[r["method"].get<std::string>()];
        ++s.n;
        s.ttft += r["ttft_ms"].get<double>();
        s.prefilled += r["prefilled"].get<double>();
        s.nll += r["nll"].get<double>();
        s.kl += r.value("kl", 0.0);
        s.share += r["computed_share"].get<double>();
        s.agree += r.value("agree", false) ? 1 : 0;
      });
  std::fprintf(stderr, "\n");
  if (!st.ok()) return Fail(st);
  std::fprintf(stderr, "%-10s %5s %9s %10s %8s %9s %7s %7s\n", "method", "steps", "ttft ms",
               "prefilled", "nll", "kl", "share", "agree");
  for (const std::string& m : o.eval.methods) {
    const Sums& s = sums[m];
    if (s.n == 0) continue;
    std::fprintf(stderr, "%-10s %5d %9.1f %10.1f %8.3f %9.5f %7.3f %6.1f%%\n", m.c_str(), s.n,
                 s.ttft / s.n, s.prefilled / s.n, s.nll / s.n, s.kl / s.n, s.share / s.n,
                 100.0 * s.agree / s.n);
  }
  return 0;
}

}  // namespace

void AddEvalSegmentsCommand(CLI::App& eval) {
  auto o = std::make_shared<SegmentsOptions>();
  CLI::App* cmd = eval.add_subcommand(
      "segments",
      "KEEP against full recomputation, prefix caching, full reuse and CacheBlend on "
      "text worlds (scripts/gen_textworld.py)");
  cmd->add_option("worlds", o->worlds, "JSONL of text worlds")->required();
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  cmd->add_option("--embed-model", o->embed_model,
                  "sentence encoder (default: the installed all-MiniLM-L6-v2)");
  cmd->add_option(
         "--methods", o->eval.methods,
         "full first, then any of prefix, reuse, cacheblend, keep, keep-nosd, keep-1hop, keep-q")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--ratio", o->eval.ratio, "mean recompute ratio r (cacheblend, keep)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->eval.top_k, "segments a keep query reads (0: all)")
      ->capture_default_str();
  cmd->add_option("--static-after", o->eval.static_after, "KEEP's t")->capture_default_str();
  cmd->add_option("--group-size", o->eval.group_size, "mean segments per group")
      ->capture_default_str();
  cmd->add_option("--chunk-tokens", o->eval.chunk_tokens, "CacheBlend's chunk size")
      ->capture_default_str();
  cmd->add_option("--steps", o->eval.max_steps, "steps per world (0: all)")->capture_default_str();
  cmd->add_option("--answer-tokens", o->eval.answer_tokens, "greedy answer length")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "threads")->capture_default_str();
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
