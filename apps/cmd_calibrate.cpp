// `kvmem calibrate memart -m MODEL`: the memart policy's preset for a model that has none
// (memory/retrieval/memart_presets.h). Retrieval heads are a property of the model: this runs the
// head report of `kvmem eval locomo --head-report` over the development conversations (conv-41,
// conv-42 and conv-43, the first 30 questions of each, as the shipped presets were found: the
// question's own tokens scoring, per-layer rr-max retrieval at k 16 while the history is written),
// takes the heads whose top blocks hold the most evidence turns, and writes the preset with the
// rest of the evaluated configuration (exact block scores, softmax-max, two neighbours, k 64) to
// <store>/presets/memart-<fingerprint>.json, where agents created with preset "auto" or "model"
// find it. Progress on stderr; the head table on stdout.
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "common.h"
#include "eval/evidence_heads.h"
#include "eval/locomo.h"
#include "eval/locomo_qa.h"
#include "eval/progress.h"
#include "memory/policy/policy_table.h"
#include "memory/retrieval/memart_presets.h"
#include "memory/store/agent_store.h"
#include "memory/store/fingerprint.h"

namespace kvmem::app {
namespace {

struct CalibrateOptions {
  std::string model;
  std::string store_dir;  // "": the default store
  std::vector<std::string> data;  // "": the development conversations
  int limit = 30;
  int heads = 5;
  int threads = DefaultThreads();
};

Result<std::vector<std::string>> DevelopmentFiles(const std::vector<std::string>& given) {
  if (!given.empty()) return given;
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> all, eval::ResolveLocomoFiles({}));
  std::vector<std::string> dev;
  for (const std::string& f : all) {
    for (const char* name : {"conv-41.json", "conv-42.json", "conv-43.json"}) {
      if (f.ends_with(std::string("/") + name)) dev.push_back(f);
    }
  }
  if (dev.size() != 3) return NotFound("the development conversations conv-41/42/43 (--data)");
  return dev;
}

int Run(const CalibrateOptions& o) {
  if (o.limit <= 0 || o.heads <= 0) return Fail(InvalidArgument("--limit and --heads must be > 0"));
  const std::string path = o.model.empty() ? DefaultModelPath() : o.model;
  auto fingerprint = memory::store::ModelFingerprint(path);
  if (!fingerprint.ok()) return Fail(fingerprint.status());
  std::string root = o.store_dir;
  if (root.empty()) {
    auto r = memory::store::DefaultStoreRoot();
    if (!r.ok()) return Fail(r.status());
    root = *r;
  }
  auto files = DevelopmentFiles(o.data);
  if (!files.ok()) return Fail(files.status());
  auto convs = eval::LoadLocomoData(*files);
  if (!convs.ok()) return Fail(convs.status());
  auto mt = LoadModelAndTokenizer(path);
  if (!mt.ok()) return Fail(mt.status());
  const model::ModelSpec& spec = mt->model->spec();

  eval::LocomoSweep sweep;
  sweep.names = {"memart"};
  sweep.top_k = {16};
  sweep.strategies = {"rr-max"};
  sweep.score_spans = {"question"};
  sweep.head_tally = true;
  auto methods = eval::ExpandLocomoMethods(sweep);
  if (!methods.ok()) return Fail(methods.status());
  eval::EvidenceHeads heads(spec.n_layers, spec.n_heads, /*top_k=*/16);
  eval::LocomoQaOptions qo;
  qo.limit = o.limit;
  qo.evidence_heads = &heads;
  qo.evidence_heads_method = methods->front().name;
  eval::ProgressLine progress("kvmem calibrate memart", 0, 0);
  qo.progress = [&](int64_t done, int64_t total, const std::string& what) {
    progress.Steps(done, total, what);
  };
  ThreadPool pool(o.threads);
  auto run = eval::RunLocomoQa(*mt->model, *mt->tok, &pool, *convs, *methods, qo, nullptr);
  if (!run.ok()) return Fail(run.status());
  std::printf("%s", heads.Markdown(10).c_str());

  const std::vector<eval::EvidenceHeads::Head> ranked = heads.Ranked();
  memory::Json preset = {{"block_size", 16},
                         {"top_k", 64},
                         {"strategy", "softmax-max-exact"},
                         {"neighbors", 2},
                         {"heads", memory::Json::array()}};
  for (int i = 0; i < o.heads && i < static_cast<int>(ranked.size()); ++i) {
    preset["heads"].push_back(std::to_string(ranked[i].layer) + "." +
                              std::to_string(ranked[i].head));
  }
  // The preset must parse as a memart config of this model before it is written.
  memory::Json check = preset;
  check["preset"] = "paper";
  memory::PolicyEnv env;
  env.model = mt->model.get();
  if (auto c = memory::ParseMemorySpec(env, "memart", check); !c.ok()) return Fail(c.status());
  const std::string dir = root + "/presets";
  if (Status st = memory::WriteCalibratedPreset(dir, *fingerprint, preset); !st.ok()) {
    return Fail(st);
  }
  std::fprintf(stderr, "kvmem calibrate memart: %s written (heads %s)\n",
               memory::CalibratedPresetPath(dir, *fingerprint).c_str(),
               preset["heads"].dump().c_str());
  return 0;
}

}  // namespace

void AddCalibrateCommand(CLI::App& app) {
  CLI::App* cal = app.add_subcommand("calibrate", "Find a memory policy's preset for a model");
  cal->require_subcommand(1);
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = cal->add_subcommand(
      "memart", "The memart policy's retrieval heads for this model, written as its preset");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  cmd->add_option("--store", o->store_dir,
                  "agent store directory, where presets/ goes (default: $XDG_DATA_HOME/kvmem, "
                  "else ~/.local/share/kvmem)");
  cmd->add_option("--data", o->data,
                  "LoCoMo files to calibrate on (default: conv-41, conv-42, conv-43 of "
                  "$KVMEM_DATA/locomo, else ../shared/data/locomo)");
  cmd->add_option("--limit", o->limit, "questions per conversation")->capture_default_str();
  cmd->add_option("--heads", o->heads, "retrieval heads in the preset")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "threads")->capture_default_str();
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
