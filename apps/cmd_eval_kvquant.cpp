// `kvmem eval kvquant`: the measured loss of each KV storage format on real text. LoCoMo
// conversations rendered as dialogue (eval/locomo.h) are tokenized without a chat template, cut
// into windows of n_ctx tokens, and each window runs with the F16 KV cache and with every format
// under test in lockstep (eval/kvquant_eval.h). One result per (format, context): perplexity,
// mean and max KL(P_f16 || P_format) of the next-token distributions, KV bytes per token.
// Results go to stdout (a table, or JSON lines with --json); progress to stderr.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "CLI/CLI.hpp"
#include "common.h"
#include "commands.h"
#include "eval/kvquant_eval.h"
#include "eval/locomo.h"
#include "eval/progress.h"
#include "kv/kv_format.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::app {
namespace {

struct KvQuantOptions {
  std::string model;
  std::vector<std::string> data;
  std::vector<int> ctx = {2048, 8192};
  std::vector<int> windows;  // one per ctx, or one for all; default 2 up to 2K, else 1
  std::string formats = "q8_0,q4_0,kivi4,q8_0:q4_0";
  int micro_batch = 256;
  int threads = DefaultThreads();
  bool json = false;
};

void PrintTableHeader() {
  std::printf("%-12s %6s %7s %7s %11s %10s %8s %11s %10s\n", "KV format", "ctx", "windows",
              "scored", "bytes/tok", "ppl", "dppl", "mean KL", "max KL");
}

void PrintResult(const eval::VariantResult& r, const eval::VariantResult& ref, int n_ctx,
                 int n_windows, bool json, bool is_ref) {
  const std::string name = r.variant.name() + (is_ref && !json ? " (ref)" : "");
  const double ppl = r.sums.perplexity(), ref_ppl = ref.sums.perplexity();
  if (json) {
    nlohmann::ordered_json j = {{"format", r.variant.name()},
                        {"n_ctx", n_ctx},
                        {"windows", n_windows},
                        {"tokens", r.sums.n},
                        {"ppl", ppl},
                        {"ref_ppl", ref_ppl},
                        {"kl", r.sums.mean_kl()},
                        {"max_kl", r.sums.max_kl},
                        {"bytes_per_token", r.bytes_per_token}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%-12s %6d %7d %7lld %11.0f %10.4f %+7.2f%% %11.3e %10.3e\n", name.c_str(), n_ctx,
                n_windows, static_cast<long long>(r.sums.n), r.bytes_per_token, ppl,
                100.0 * (ppl / ref_ppl - 1.0), r.sums.mean_kl(), r.sums.max_kl);
  }
  std::fflush(stdout);
}

int Run(const KvQuantOptions& o) {
  auto variants = eval::ParseKvVariants(o.formats);
  if (!variants.ok()) return Fail(variants.status());
  if (o.ctx.empty()) return Fail(InvalidArgument("--ctx is empty"));
  if (!o.windows.empty() && o.windows.size() != 1 && o.windows.size() != o.ctx.size()) {
    return Fail(InvalidArgument("--windows takes one count, or one per --ctx value"));
  }
  if (o.micro_batch <= 0) return Fail(InvalidArgument("--batch must be positive"));
  std::vector<int> windows;
  for (size_t i = 0; i < o.ctx.size(); ++i) {
    windows.push_back(o.windows.empty()        ? (o.ctx[i] <= 2048 ? 2 : 1)
                      : o.windows.size() == 1  ? o.windows[0]
                                               : o.windows[i]);
    if (windows.back() <= 0) return Fail(InvalidArgument("--windows must be positive"));
  }

  auto convs_or = eval::LoadLocomoData(o.data);
  if (!convs_or.ok()) return Fail(convs_or.status());
  const std::vector<eval::LocomoConversation>& convs = *convs_or;
  auto mt = LoadModelAndTokenizer(o.model);
  if (!mt.ok()) return Fail(mt.status());
  const model::Model& model = *mt->model;
  const tokenizer::Tokenizer* tok = &*mt->tok;
  Status ctx_ok = CheckContexts(o.ctx, 2, model.spec());
  if (!ctx_ok.ok()) return Fail(ctx_ok);

  // Whole conversations, BOS first when the tokenizer asks for it; no chat template.
  std::vector<std::vector<int32_t>> docs;
  std::vector<int64_t> doc_tokens;
  for (const auto& c : convs) {
    docs.push_back(tok->Encode(eval::RenderConversation(c).text, /*add_special=*/true,
                               /*parse_special=*/false));
    doc_tokens.push_back(static_cast<int64_t>(docs.back().size()));
  }
  const auto [shortest, longest] = std::minmax_element(doc_tokens.begin(), doc_tokens.end());
  std::fprintf(stderr,
               "kvmem eval kvquant: %zu conversations of %lld..%lld tokens; KV formats f16 (ref), "
               "%s; %d threads\n",
               docs.size(), static_cast<long long>(*shortest), static_cast<long long>(*longest),
               o.formats.c_str(), o.threads);
  std::vector<std::vector<eval::WindowRef>> plans;
  const eval::WorkModel work(model.spec());
  const int n_runs = static_cast<int>(1 + variants->size());  // reference + formats
  int64_t total_rows = 0;
  double total_work = 0;
  for (size_t i = 0; i < o.ctx.size(); ++i) {
    auto plan = eval::PlanWindows(doc_tokens, o.ctx[i], windows[i]);
    if (!plan.ok()) return Fail(plan.status());
    plans.push_back(*plan);
    total_rows += int64_t{o.ctx[i]} * windows[i] * n_runs;
    total_work += work.Positions(o.ctx[i]) * windows[i] * n_runs;
  }

  ThreadPool threads(o.threads);
  eval::ProgressLine progress("kvmem eval kvquant", total_rows, total_work);
  int64_t rows_before = 0;
  double work_before = 0;
  if (!o.json) PrintTableHeader();
  for (size_t i = 0; i < o.ctx.size(); ++i) {
    auto created = eval::KvQuantEvaluator::Create(model, &threads, *variants, o.ctx[i],
                                                  o.micro_batch);
    if (!created.ok()) return Fail(created.status());
    eval::KvQuantEvaluator& ev = **created;
    for (size_t w = 0; w < plans[i].size(); ++w) {
      const eval::WindowRef& ref = plans[i][w];
      const std::span<const int32_t> ids(docs[ref.doc].data() + ref.begin, o.ctx[i]);
      const std::string what = "ctx " + std::to_string(o.ctx[i]) + " window " +
                               std::to_string(w + 1) + "/" + std::to_string(plans[i].size()) +
                               " (" + convs[ref.doc].id + ")";
      Status st = ev.AddWindow(ids, [&](int64_t done) {
        const double positions = static_cast<double>(done) / n_runs;
        progress.Update(rows_before + done, work_before + work.Positions(positions) * n_runs, what);
      });
      if (!st.ok()) return Fail(st.WithContext(what));
      rows_before += ev.rows_per_window(o.ctx[i]);
      work_before += work.Positions(o.ctx[i]) * n_runs;
    }
    progress.Finish();
    PrintResult(ev.reference(), ev.reference(), o.ctx[i], windows[i], o.json, /*is_ref=*/true);
    for (const auto& r : ev.results()) {
      PrintResult(r, ev.reference(), o.ctx[i], windows[i], o.json, /*is_ref=*/false);
    }
  }
  std::fprintf(stderr, "kvmem eval kvquant: %lld token rows in %.1f s (%.1f rows/s), threads %d\n",
               static_cast<long long>(total_rows), progress.Seconds(),
               total_rows / std::max(progress.Seconds(), 1e-9), o.threads);
  return 0;
}

}  // namespace

void AddEvalKvQuantCommand(CLI::App& eval) {
  auto o = std::make_shared<KvQuantOptions>();
  CLI::App* cmd = eval.add_subcommand(
      "kvquant",
      "Perplexity and KL to the F16 KV cache of each KV storage format, on LoCoMo dialogue");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  cmd->add_option("--data", o->data,
                  "LoCoMo .json files or directories (default: $KVMEM_DATA/locomo, else "
                  "../shared/data/locomo)");
  cmd->add_option("--ctx", o->ctx, "context lengths (window sizes) in tokens")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--windows", o->windows,
                  "windows per context: one count, or one per --ctx value (default: 2 for "
                  "contexts up to 2048, else 1)")
      ->delimiter(',');
  cmd->add_option("--formats", o->formats,
                  "KV formats under test, comma-separated, K:V for mixed (e.g. q8_0:q4_0); one of " +
                      kv::KvFormatNames())
      ->capture_default_str();
  cmd->add_option("--batch", o->micro_batch, "micro-batch in tokens")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "threads")->capture_default_str();
  cmd->add_flag("--json", o->json, "one JSON object per line instead of a table");
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
