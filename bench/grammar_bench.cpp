// grammar_bench: the cost of constrained decoding's token mask per generated token, over a real
// vocabulary, as a share of a decode step of the same model timed in the same run.
//
// For each model: build the TokenTable, compile a JSON schema, tokenize a valid document with the
// model's tokenizer and walk it token by token: FillMask (timed), check that the document's next
// token is in the mask, AcceptToken. The walk runs once on a fresh Matcher (cold: every state is
// new, as for the first request with a schema) and again after Reset (warm: the matcher's cached
// transitions reused). A decode step is one Forward of one token after a short prompt, 2 threads
// by default. bench/README.md has the command and figures.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/forward.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_table.h"
#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"
#include "model/model.h"
#include "tokenizer/gguf_config.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace kvmem;
using namespace kvmem::engine::grammar;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 64},
    "age": {"type": "integer"},
    "email": {"type": "string"},
    "role": {"enum": ["admin", "editor", "viewer"]},
    "active": {"type": "boolean"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"$ref": "#/$defs/Address"},
    "notes": {"anyOf": [{"type": "string"}, {"type": "null"}]}
  },
  "required": ["name", "age", "role", "active", "tags", "address"],
  "additionalProperties": false,
  "$defs": {"Address": {"type": "object", "properties": {
    "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string"},
    "country": {"type": "string", "enum": ["FR", "DE", "JP", "US"]}},
    "required": ["street", "city", "country"]}}
})";

const char* kDocument = R"({
  "name": "Amélie Poulain-Dubois",
  "age": 29,
  "email": "amelie.poulain@example.com",
  "role": "editor",
  "active": true,
  "score": 87.25,
  "tags": ["photography", "cinema", "Montmartre", "crème brûlée", "東京"],
  "address": {
    "street": "15 rue Lepic",
    "city": "Paris",
    "zip": "75018",
    "country": "FR"
  },
  "notes": "Prefers e-mail; speaks French, English and a little Japanese (日本語). \"Quotes\" are escaped."
})";

struct Stats {
  double mean = 0, median = 0, p90 = 0, max = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  std::sort(v.begin(), v.end());
  s.median = v[v.size() / 2];
  s.p90 = v[v.size() * 9 / 10];
  s.max = v.back();
  return s;
}

// One walk of `ids` through `m`; per-token mask times in µs. False if the document is refused.
bool Walk(Matcher* m, const TokenTable& table, const std::vector<int32_t>& ids,
          std::vector<double>* us, double* allowed) {
  TokenMask mask;
  *allowed = 0;
  for (int32_t id : ids) {
    const auto t0 = Clock::now();
    m->FillMask(table, &mask);
    us->push_back(Us(t0, Clock::now()));
    if (std::getenv("GRAMMAR_BENCH_TRACE")) {
      std::fprintf(stderr, "%8.0f us  %6d allowed  before %s\n", us->back(), mask.Count(),
                   std::string(table.piece(id)).c_str());
    }
    *allowed += mask.Count();
    if (!mask.Test(id) || !m->AcceptToken(table, id)) {
      std::fprintf(stderr, "token %d (%s) refused\n", id, std::string(table.piece(id)).c_str());
      return false;
    }
  }
  m->FillMask(table, &mask);
  *allowed /= static_cast<double>(ids.size());
  return m->IsComplete() && !table.eog_ids().empty() && mask.Test(table.eog_ids()[0]);
}

// Median time of one decode step (one token after a short prompt), in ms.
double DecodeStepMs(const model::Model& model, const std::vector<int32_t>& ids, int threads) {
  const int block = 256;
  kv::KvPool pool(model.kv_geometry(block), 4);
  kv::KvSequence seq(&pool);
  ThreadPool tp(threads);
  std::vector<float> logits;
  std::vector<int32_t> prompt(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 32));
  if (!engine::Forward(model, &tp, &seq, prompt, 0, false, &logits).ok()) return -1;
  std::vector<double> ms;
  for (int i = 0; i < 24; ++i) {
    const int32_t one = ids[(prompt.size() + static_cast<size_t>(i)) % ids.size()];
    const auto t0 = Clock::now();
    if (!engine::Forward(model, &tp, &seq, {&one, 1}, seq.n_rows(), false, &logits).ok()) return -1;
    ms.push_back(Us(t0, Clock::now()) / 1000.0);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int RunModel(const std::string& path, int threads) {
  auto model = model::Model::Load(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), model.status().ToString().c_str());
    return 1;
  }
  auto tok = tokenizer::LoadTokenizer((*model)->file());
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  const auto t0 = Clock::now();
  TokenTable table = TokenTable::FromTokenizer(*tok);
  const double table_ms = Us(t0, Clock::now()) / 1000.0;
  const auto t1 = Clock::now();
  auto grammar = CompileJsonSchema(kSchema);
  const double compile_ms = Us(t1, Clock::now()) / 1000.0;
  if (!grammar.ok()) {
    std::fprintf(stderr, "%s\n", grammar.status().ToString().c_str());
    return 1;
  }
  const std::vector<int32_t> ids = tok->Encode(kDocument, /*add_special=*/false);

  Matcher m(*grammar);
  std::vector<double> cold, warm;
  double allowed = 0;
  if (!Walk(&m, table, ids, &cold, &allowed)) return 1;
  for (int rep = 0; rep < 5; ++rep) {
    m.Reset();
    if (!Walk(&m, table, ids, &warm, &allowed)) return 1;
  }
  const double step_ms = DecodeStepMs(**model, ids, threads);
  const Stats c = Summarize(cold), w = Summarize(warm);
  std::string name = path.substr(path.find_last_of('/') + 1);
  std::printf("%s: vocab %d, trie %zu nodes (built in %.0f ms), schema compiled in %.2f ms\n",
              name.c_str(), table.vocab_size(), table.nodes().size(), table_ms, compile_ms);
  std::printf("  document: %zu tokens, %.0f tokens allowed per step on average\n", ids.size(),
              allowed);
  std::printf("  mask cold (fresh matcher): mean %.0f us, median %.0f, p90 %.0f, max %.0f\n",
              c.mean, c.median, c.p90, c.max);
  std::printf("  mask warm (after Reset):   mean %.0f us, median %.0f, p90 %.0f, max %.0f\n",
              w.mean, w.median, w.p90, w.max);
  if (step_ms > 0) {
    std::printf("  decode step (%d threads, median of 24): %.2f ms -> mask/step: cold %.1f%%, "
                "warm %.1f%%\n",
                threads, step_ms, 100.0 * c.mean / 1000.0 / step_ms,
                100.0 * w.mean / 1000.0 / step_ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      models.push_back(a);
    }
  }
  if (models.empty()) {
    const char* home = std::getenv("HOME");
    const std::string dir = std::string(home ? home : ".") + "/.cache/kvmem/models/";
    models = {dir + "SmolLM2-135M-Instruct.Q4_1.gguf", dir + "gemma-3-270m-q4_k_m.gguf"};
  }
  int rc = 0;
  for (const std::string& m : models) rc |= RunModel(m, threads);
  return rc;
}
