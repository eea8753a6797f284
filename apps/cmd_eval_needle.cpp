// `kvmem eval needle`: needle-in-a-haystack over long contexts (eval/needle.h). The haystack is
// the LoCoMo conversations rendered as dialogue, one after another; for each context length and
// depth a code word is planted, asked for at the end, and scored against control words. Results
// go to stdout (a table, or JSON lines with --json); progress to stderr.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "CLI/CLI.hpp"
#include "common.h"
#include "commands.h"
#include "eval/locomo.h"
#include "eval/needle.h"
#include "eval/progress.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::app {
namespace {

struct NeedleOptions {
  std::string model;
  std::vector<std::string> data;
  std::vector<int> ctx = {16384, 24576};
  std::vector<double> depths = {0.1, 0.3, 0.5, 0.7, 0.9};
  int controls = 4;
  int answer_tokens = 6;
  int64_t seed = 1;
  int micro_batch = 256;
  int threads = DefaultThreads();
  bool json = false;
};

void PrintRow(const eval::NeedleResult& r, double target_depth, bool json) {
  if (json) {
    nlohmann::ordered_json j = {{"context", r.context},
                                {"target_depth", target_depth},
                                {"depth", r.depth},
                                {"needle_token", r.needle_token},
                                {"word", r.word},
                                {"logp_word", r.logp_word},
                                {"logp_control_mean", r.logp_control_mean},
                                {"logp_control_max", r.logp_control_max},
                                {"rank", r.rank},
                                {"answered", r.answered},
                                {"greedy", r.greedy},
                                {"seconds", r.seconds}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::string greedy = r.greedy;
    for (char& c : greedy) {
      if (c == '\n') c = ' ';
    }
    std::printf("%7lld %5.2f %7lld %-11s %9.2f %9.2f %9.2f %4d %-3s  \"%s\"\n",
                static_cast<long long>(r.context), r.depth,
                static_cast<long long>(r.needle_token), r.word.c_str(), r.logp_word,
                r.logp_control_mean, r.logp_control_max, r.rank, r.answered ? "yes" : "no",
                greedy.c_str());
  }
  std::fflush(stdout);
}

int Run(const NeedleOptions& o) {
  if (o.ctx.empty() || o.depths.empty()) return Fail(InvalidArgument("--ctx and --depths"));
  if (o.controls < 1) return Fail(InvalidArgument("--controls must be at least 1"));
  if (o.micro_batch <= 0 || o.answer_tokens <= 0) {
    return Fail(InvalidArgument("--batch and --answer-tokens must be positive"));
  }
  for (double d : o.depths) {
    if (!(d >= 0.0 && d <= 1.0)) return Fail(InvalidArgument("--depths must lie in [0, 1]"));
  }
  auto convs = eval::LoadLocomoData(o.data);
  if (!convs.ok()) return Fail(convs.status());
  std::string haystack;
  for (const auto& c : *convs) haystack += eval::RenderConversation(c).text + "\n";
  auto mt = LoadModelAndTokenizer(o.model);
  if (!mt.ok()) return Fail(mt.status());
  const model::Model& model = *mt->model;
  const tokenizer::Tokenizer& tok = *mt->tok;
  Status ctx_ok = CheckContexts(o.ctx, 256, model.spec());
  if (!ctx_ok.ok()) return Fail(ctx_ok);

  ThreadPool threads(o.threads);
  const eval::WorkModel work(model.spec());
  int64_t total_rows = 0;
  double total_work = 0;
  for (int c : o.ctx) {
    total_rows += int64_t{c} * static_cast<int64_t>(o.depths.size());
    total_work += work.Positions(c) * static_cast<double>(o.depths.size());
  }
  eval::ProgressLine progress("kvmem eval needle", total_rows, total_work);
  if (!o.json) {
    std::printf("%7s %5s %7s %-11s %9s %9s %9s %4s %-3s  %s\n", "context", "depth", "needle",
                "word", "logP word", "ctrl mean", "ctrl max", "rank", "ok", "greedy answer");
  }
  int n = 0, answered = 0, top = 0;
  double margin = 0;
  int64_t rows_before = 0;
  double work_before = 0;
  for (int c : o.ctx) {
    for (size_t di = 0; di < o.depths.size(); ++di) {
      const uint64_t seed = static_cast<uint64_t>(o.seed) * 1000003u + static_cast<uint64_t>(c) +
                            di * 7919u;
      auto words = eval::PickNeedleWords(haystack, seed, o.controls);
      if (!words.ok()) return Fail(words.status());
      // Room for the answer tokens after the prompt.
      auto prompt = eval::BuildNeedlePrompt(haystack, tok, c - o.answer_tokens - 8,
                                            o.depths[di], (*words)[0]);
      if (!prompt.ok()) return Fail(prompt.status());
      const std::string what = "ctx " + std::to_string(c) + " depth " +
                               std::to_string(o.depths[di]).substr(0, 4);
      auto r = eval::RunNeedleCase(model, tok, &threads, *prompt, *words, o.micro_batch,
                                   o.answer_tokens, [&](int64_t done) {
                                     progress.Update(rows_before + done,
                                                     work_before + work.Positions(done), what);
                                   });
      if (!r.ok()) return Fail(r.status().WithContext(what));
      rows_before += c;
      work_before += work.Positions(c);
      progress.Finish();
      PrintRow(*r, o.depths[di], o.json);
      ++n;
      answered += r->answered ? 1 : 0;
      top += r->rank == 1 ? 1 : 0;
      margin += r->logp_word - r->logp_control_max;
    }
  }
  std::fprintf(stderr,
               "kvmem eval needle: %d cases | answered %d | planted word most probable %d | mean "
               "logP margin over the best control %.2f nats | %.0f s\n",
               n, answered, top, margin / std::max(n, 1), progress.Seconds());
  return 0;
}

}  // namespace

void AddEvalNeedleCommand(CLI::App& eval) {
  auto o = std::make_shared<NeedleOptions>();
  CLI::App* cmd = eval.add_subcommand(
      "needle", "Needle in a haystack: a planted code word recalled from a long LoCoMo context");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  cmd->add_option("--data", o->data,
                  "LoCoMo .json files or directories (default: $KVMEM_DATA/locomo, else "
                  "../shared/data/locomo)");
  cmd->add_option("--ctx", o->ctx, "context lengths in tokens")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--depths", o->depths, "needle depths, 0 (start) .. 1 (end)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--controls", o->controls, "control words per case")->capture_default_str();
  cmd->add_option("--answer-tokens", o->answer_tokens, "greedy answer length")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the word choice")->capture_default_str();
  cmd->add_option("--batch", o->micro_batch, "micro-batch in tokens")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "threads")->capture_default_str();
  cmd->add_flag("--json", o->json, "one JSON object per line instead of a table");
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
