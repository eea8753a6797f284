// `kvmem logits` and `kvmem generate-ids`: token ids in, raw numbers out. They exist so that
// independent implementations (the numpy reference, llama.cpp) can be compared with kvmem
// without going through a tokenizer.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "common.h"
#include "commands.h"
#include "engine/forward.h"
#include "engine/generate.h"

namespace kvmem::app {
namespace {

struct IdsOptions {
  std::string model;
  std::string tokens;
  std::string out;
  int n_predict = 64;
  int threads = DefaultThreads();
};

// The model, a pool with room for n_ctx tokens and one sequence in it: what both commands run.
struct IdsSession {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<kv::KvPool> pool;
  std::unique_ptr<kv::KvSequence> seq;
};

Result<IdsSession> OpenSession(const std::string& path, size_t n_ctx) {
  KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, LoadModel(path));
  constexpr int kBlock = 256;
  IdsSession s;
  s.pool = std::make_unique<kv::KvPool>(m->kv_geometry(kBlock),
                                        static_cast<int>((n_ctx + kBlock - 1) / kBlock));
  s.seq = std::make_unique<kv::KvSequence>(s.pool.get());
  s.model = std::move(m);
  return s;
}

int RunLogits(const IdsOptions& o) {
  auto ids = ParseIdList(o.tokens);
  if (!ids.ok()) return Fail(ids.status());
  auto s = OpenSession(o.model, ids->size());
  if (!s.ok()) return Fail(s.status());
  ThreadPool threads(o.threads);
  std::vector<float> logits;
  Status st = engine::Forward(*s->model, &threads, s->seq.get(), *ids, 0, /*all_logits=*/true,
                              &logits);
  if (!st.ok()) return Fail(st);
  std::ofstream f(o.out, std::ios::binary);
  f.write(reinterpret_cast<const char*>(logits.data()),
          static_cast<std::streamsize>(logits.size() * sizeof(float)));
  if (!f) return Fail(IoError("cannot write '" + o.out + "'"));
  return 0;
}

int RunGenerateIds(const IdsOptions& o) {
  auto ids = ParseIdList(o.tokens);
  if (!ids.ok()) return Fail(ids.status());
  if (o.n_predict < 1) return Fail(InvalidArgument("-n must be at least 1"));
  auto s = OpenSession(o.model, ids->size() + o.n_predict);
  if (!s.ok()) return Fail(s.status());
  ThreadPool threads(o.threads);
  engine::GenerateParams params;
  params.max_new_tokens = o.n_predict;
  params.sampler.temperature = 0;
  std::vector<int32_t> history, out;
  engine::GenerateStats stats;
  Status st = engine::Generate(
      *s->model, &threads, s->seq.get(), *ids, params, nullptr,
      [&](int32_t t) {
        out.push_back(t);
        return true;
      },
      &history, &stats);
  if (!st.ok()) return Fail(st);
  for (size_t i = 0; i < out.size(); ++i) std::printf(i ? ",%d" : "%d", out[i]);
  std::printf("\n");
  return 0;
}

}  // namespace

void AddIdsCommands(CLI::App& app) {
  auto opts = std::make_shared<IdsOptions>();
  CLI::App* lg = app.add_subcommand(
      "logits", "Write float32 logits of every position, shape (n_tokens, n_vocab), to a file");
  lg->add_option("-m,--model", opts->model, "GGUF model (default: the installed SmolLM2)");
  lg->add_option("--tokens", opts->tokens, "comma-separated prompt token ids")->required();
  lg->add_option("-o,--out", opts->out, "output file")->required();
  lg->add_option("-t,--threads", opts->threads, "threads");
  lg->callback([opts] { throw CLI::RuntimeError(RunLogits(*opts)); });

  CLI::App* gi = app.add_subcommand(
      "generate-ids", "Greedy continuation of token ids; prints the new ids comma-separated");
  gi->add_option("-m,--model", opts->model, "GGUF model (default: the installed SmolLM2)");
  gi->add_option("--tokens", opts->tokens, "comma-separated prompt token ids")->required();
  gi->add_option("-n,--n-predict", opts->n_predict, "tokens to generate");
  gi->add_option("-t,--threads", opts->threads, "threads");
  gi->callback([opts] { throw CLI::RuntimeError(RunGenerateIds(*opts)); });
}

}  // namespace kvmem::app
