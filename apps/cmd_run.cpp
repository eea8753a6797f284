// `kvmem run`: one prompt in, generated text streamed to stdout as it is produced; timings and a
// hash of the final logits (a cheap regression check) on stderr. Mirrors llama.cpp's CLI flags.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common.h"
#include "commands.h"
#include "core/memory_usage.h"
#include "engine/generate.h"
#include "engine/memory_budget.h"
#include "engine/stop_strings.h"
#include "kv/kv_format.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/harmony.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::app {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  std::string system;
  bool chat = false;
  int n_predict = 256;
  int n_ctx = 4096;
  int threads = DefaultThreads();
  int64_t seed = -1;
  engine::SamplerConfig sampler;
  std::vector<std::string> stops;
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  int kv_block_rows = 256;
};

Result<std::string> PromptText(const RunOptions& o) {
  if (!o.prompt_file.empty()) {
    std::ifstream f(o.prompt_file, std::ios::binary);
    if (!f) return IoError("cannot read prompt file '" + o.prompt_file + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  return o.prompt;
}

constexpr double kMiB = 1024.0 * 1024.0;

// Measured peak RSS against the budget computed from the geometry (engine/memory_budget.h).
// "runtime" is what was resident before the first forward pass besides the GGUF mapping: code
// and libraries, tokenizer tables, the loader's copies of small tensors.
void PrintMemory(const model::Model& model, const kv::KvPool& pool,
                 const engine::GenerateStats& stats, int max_batch, size_t rss_before_compute) {
  const engine::MemoryBudget b =
      engine::PlainRunBudget(model, pool, stats.n_prompt, stats.n_generated, max_batch);
  const size_t peak = ReadProcessMemory().peak_rss;
  const size_t expected = b.total() + rss_before_compute;
  std::fprintf(stderr,
               "kvmem: memory: peak RSS %.1f MiB | budget %.1f MiB = weights %.1f + KV %.1f "
               "(%.1f without window release; pool peak %.1f) + scratch %.1f + runtime %.1f "
               "| peak/budget %.3f\n",
               peak / kMiB, expected / kMiB, b.weights / kMiB, b.kv / kMiB,
               b.kv_without_release / kMiB, pool.peak_bytes_in_use() / kMiB, b.scratch / kMiB,
               rss_before_compute / kMiB, static_cast<double>(peak) / std::max<size_t>(expected, 1));
}

int Run(RunOptions o) {
  auto text = PromptText(o);
  if (!text.ok()) return Fail(text.status());
  auto mt = LoadModelAndTokenizer(o.model);
  if (!mt.ok()) return Fail(mt.status());
  const model::Model& model = *mt->model;
  const tokenizer::Tokenizer* tok = &*mt->tok;

  std::string prompt = *text;
  if (o.chat) {
    auto tmpl = tokenizer::DetectChatTemplate(tok->chat_template(), model.spec().arch_name);
    if (!tmpl.ok()) return Fail(tmpl.status().WithContext("chat template"));
    std::vector<tokenizer::ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system});
    msgs.push_back({"user", prompt});
    auto rendered = tokenizer::RenderChat(*tmpl, msgs, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return Fail(rendered.status());
    prompt = *rendered;
  }
  std::vector<int32_t> ids = tok->Encode(prompt, /*add_special=*/true, /*parse_special=*/true);
  if (ids.empty()) return Fail(InvalidArgument("the prompt is empty"));

  const int block = o.kv_block_rows;
  if (block % 32 != 0) {
    return Fail(InvalidArgument("--kv-block-rows must be a multiple of 32 (kivi4 key groups)"));
  }
  const int64_t n_ctx = std::min<int64_t>(o.n_ctx, model.spec().n_ctx_train);
  if (static_cast<int64_t>(ids.size()) >= n_ctx) {
    return Fail(OutOfRange("prompt has " + std::to_string(ids.size()) +
                           " tokens; the context holds " + std::to_string(n_ctx)));
  }
  auto fk = kv::ParseKvFormat(o.cache_type_k);
  if (!fk.ok()) return Fail(fk.status().WithContext("--cache-type-k"));
  auto fv = kv::ParseKvFormat(o.cache_type_v);
  if (!fv.ok()) return Fail(fv.status().WithContext("--cache-type-v"));
  const kv::KvFormats formats{*fk, *fv};
  Status fst = kv::CheckKvFormats(formats, model.spec().head_dim_k, model.spec().head_dim_v);
  if (!fst.ok()) return Fail(fst);
  kv::KvPool pool(model.kv_geometry(block), static_cast<int>((n_ctx + block - 1) / block),
                  formats);
  kv::KvSequence seq(&pool);
  ThreadPool threads(o.threads);

  engine::GenerateParams params;
  params.sampler = o.sampler;
  params.sampler.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed)
                                    : static_cast<uint64_t>(
                                          std::chrono::steady_clock::now().time_since_epoch().count());
  params.max_new_tokens =
      o.n_predict < 0 ? static_cast<int>(n_ctx - ids.size())
                      : std::min<int>(o.n_predict, static_cast<int>(n_ctx - ids.size()));

  tokenizer::ReplyDecoder decoder(tok, ids);  // harmony: only the final channel is printed
  engine::StopMatcher stops(o.stops);
  Status decode_error;
  auto emit = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  std::vector<int32_t> history;
  engine::GenerateStats stats;
  // All that is resident before the first forward pass but the weights, which the budget counts
  // whole: the GGUF mapping and the packed copies of matrices.
  const size_t rss_before_compute =
      ReadProcessMemory().rss - MappedFileRss(o.model.empty() ? DefaultModelPath() : o.model) -
      model.packed_bytes();
  Status st = engine::Generate(
      model, &threads, &seq, ids, params,
      [&](int32_t t) { return tok->IsEndOfGeneration(t); },
      [&](int32_t t) {
        auto piece = decoder.Push(t);
        if (!piece.ok()) {
          decode_error = piece.status();
          return false;
        }
        emit(stops.Push(*piece));
        return !stops.stopped();
      },
      &history, &stats);
  if (!st.ok()) return Fail(st);
  if (!decode_error.ok()) return Fail(decode_error);
  if (!stops.stopped()) emit(stops.Push(decoder.Flush()) + stops.Flush());
  emit("\n");

  const int decode_evals = std::max(0, stats.n_generated - 1);
  std::fprintf(stderr,
               "\nkvmem: prompt %d tokens %.2f tok/s | decode %d tokens %.2f tok/s | "
               "threads %d | stop %s | logits hash %016" PRIx64 "\n",
               stats.n_prompt, stats.n_prompt / std::max(stats.prompt_seconds, 1e-9),
               stats.n_generated, decode_evals / std::max(stats.decode_seconds, 1e-9), o.threads,
               stats.stop_reason.c_str(), stats.logits_hash);
  PrintMemory(model, pool, stats, params.max_batch, rss_before_compute);
  return 0;
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "Generate text from a prompt");
  run->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  run->add_option("-p,--prompt", o->prompt, "prompt text");
  run->add_option("-f,--file", o->prompt_file, "read the prompt from a file");
  run->add_option("-n,--n-predict", o->n_predict, "tokens to generate (-1: until end or full)")
      ->capture_default_str();
  run->add_flag("--chat", o->chat, "wrap the prompt in the model's chat template");
  run->add_option("--system", o->system, "system message (with --chat)");
  run->add_option("-c,--ctx-size", o->n_ctx, "context size in tokens")->capture_default_str();
  run->add_option("-t,--threads", o->threads, "threads")->capture_default_str();
  run->add_option("-s,--seed", o->seed, "RNG seed (-1: random)")->capture_default_str();
  run->add_option("--temp", o->sampler.temperature, "temperature (0: greedy)")
      ->capture_default_str();
  run->add_option("--top-k", o->sampler.top_k, "top-k (0: off)")->capture_default_str();
  run->add_option("--top-p", o->sampler.top_p, "top-p (1: off)")->capture_default_str();
  run->add_option("--min-p", o->sampler.min_p, "min-p (0: off)")->capture_default_str();
  run->add_option("--repeat-penalty", o->sampler.repeat_penalty, "repetition penalty (1: off)")
      ->capture_default_str();
  run->add_option("--repeat-last-n", o->sampler.repeat_last_n, "window of the penalty")
      ->capture_default_str();
  run->add_option("--stop", o->stops, "stop string (repeatable)");
  run->add_option("--cache-type-k,--ctk", o->cache_type_k, "KV cache format of keys: " +
                                                               kv::KvFormatNames())
      ->capture_default_str();
  run->add_option("--kv-block-rows", o->kv_block_rows,
                  "rows per KV pool block (the unit of allocation and of attention spans)")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  run->add_option("--cache-type-v,--ctv", o->cache_type_v, "KV cache format of values")
      ->capture_default_str();
  run->callback([o] {
    if (o->prompt.empty() && o->prompt_file.empty()) {
      throw CLI::RuntimeError(Fail(InvalidArgument("give a prompt with -p or -f")));
    }
    throw CLI::RuntimeError(Run(*o));
  });
}

}  // namespace kvmem::app
