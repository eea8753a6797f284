// `kvmem bench`: llama-bench's tests of plain inference speed, and the work each does per token
// so a result can be set against the machine's roofline (roofline.h).
//
//   ppN      prompt processing: N tokens in micro-batches of --ubatch from an empty cache,
//            logits of the last token only.
//   tgN      generation: N tokens one at a time from an empty cache, logits every step.
//   tgN@dD   the same after D tokens are already in the cache (prefilled once, not timed);
//            ppN@dD likewise.
//
// Tokens are uniform random ids with a fixed seed, as in llama-bench. Each test gets one
// untimed warm-up (a whole run for pp, one token for tg, as llama-bench does), then `reps`
// timed repetitions, each starting from the same cache of D rows.
// Not thread-safe: a run owns its ThreadPool and KV pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "eval/roofline.h"
#include "kv/kv_format.h"
#include "model/model.h"
#include "model/model_spec.h"

namespace kvmem::eval {

struct BenchTest {
  enum class Kind { kPrompt, kGenerate };
  Kind kind = Kind::kPrompt;
  int64_t n_tokens = 0;      // N: tokens timed
  int64_t depth = 0;         // D: tokens in the cache before them
  std::string name() const;  // "pp512", "tg128@d4096"
  bool operator==(const BenchTest&) const = default;
};

// One name, strictly: "pp" or "tg", N in 1..2^24 without sign or leading zeros, optionally
// "@d" and D likewise. InvalidArgument naming the text otherwise.
Result<BenchTest> ParseBenchTest(std::string_view name);
// A comma-separated list of names, none empty.
Result<std::vector<BenchTest>> ParseBenchTests(std::string_view list);
// pp128,pp512,pp2048,tg128,tg128@d1024,tg128@d4096,tg128@dX, X = min(16384, training context).
std::vector<BenchTest> DefaultBenchTests(const model::ModelSpec& spec);
// "1,2" -> {1, 2}; each a positive integer <= 1024, else InvalidArgument naming it.
Result<std::vector<int>> ParseThreadCounts(std::string_view list);
// A positive integer <= max, else InvalidArgument naming `flag`.
Result<int> ParsePositiveInt(std::string_view text, std::string_view flag, int max);

// Tests past the training context still run (as in llama-bench) and are flagged; past 4x it
// they are refused (OutOfRange naming the test).
bool BeyondTrainingContext(const BenchTest& t, const model::ModelSpec& spec);
Status CheckBenchTests(const std::vector<BenchTest>& tests, const model::ModelSpec& spec);

struct RepStats {
  double median = 0, min = 0, max = 0;  // of the values; all 0 when there are none
};
RepStats Summarize(std::vector<double> values);

// Work accounting, pure functions of the spec.
//
// Rows a token at position p reads in a layer: p + 1 (its own included), or min(p + 1, W) in a
// sliding-window layer of window W (model_spec.h). Mean over the tokens at first_pos..+n-1.
double MeanVisibleRows(int sliding_window, int64_t first_pos, int64_t n);
// Parameters of one layer's linear maps a token multiplies by: Q, K, V, O and the gated FFN's
// gate, up and down (MoE: the router and the selected experts').
int64_t LinearParamsPerLayer(const model::ModelSpec& s);
// FLOPs per token of a forward pass over n tokens at first_pos.., n_logits of them getting
// logits (1 for a prompt, n for generation):
//   2 x n_layers x LinearParamsPerLayer                   (one multiply-add per weight)
// + 2 x n_vocab x n_embd x n_logits / n                   (LM head)
// + sum over layers of 2 x n_heads x (head_dim_k + head_dim_v) x MeanVisibleRows
//                                                         (q.k scores and the weighted sum of V)
// Norms, RoPE, softmax and activations are left out (well under 1% here).
double FlopsPerToken(const model::ModelSpec& s, int64_t first_pos, int64_t n, int64_t n_logits);
// Weight bytes one decode step reads: all tensors, less the token-embedding table unless it is
// tied to the LM head (untied, a step reads one row of it: left out), with the matrices repacked
// at load (packed_source_bytes of the file) read from their copies (packed_bytes) instead.
size_t DecodeWeightBytes(size_t weight_bytes, size_t tok_embd_bytes, bool tied_output,
                         size_t packed_source_bytes = 0, size_t packed_bytes = 0);
// KV bytes per generated token at first_pos..+n-1: sum over layers of MeanVisibleRows x the
// bytes of one row's K and V in every KV head, in their stored formats.
double KvBytesPerToken(const model::ModelSpec& s, kv::KvFormats formats, int64_t first_pos,
                       int64_t n);

struct BenchOptions {
  std::vector<int> threads = {1, 2};
  std::vector<BenchTest> tests;
  int reps = 5;
  kv::KvFormats formats;  // f16/f16 like llama-bench
  int ubatch = 512;       // llama-bench's n_ubatch
  uint64_t seed = 1234;
};

struct BenchRow {
  BenchTest test;
  int threads = 0;
  int reps = 0;
  RepStats tokens_per_second;
  bool beyond_training_context = false;
  Roofline roofline;
  // Prompt tests: FLOPs per token, set against the FMA peak; generation: bytes per token, set
  // against the read bandwidth.
  double work_per_token = 0;
  double achieved() const { return tokens_per_second.median * work_per_token / 1e9; }
  double roofline_fraction() const;
};

// For each thread count (with its roofline, in the same order), every test: on_row as each
// finishes. A test with depth shows its prefill's progress on stderr.
Status RunBench(const model::Model& model, const BenchOptions& o,
                const std::vector<Roofline>& rooflines,
                const std::function<void(const BenchRow&)>& on_row);

}  // namespace kvmem::eval
