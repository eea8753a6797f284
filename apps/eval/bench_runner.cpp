#include "eval/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <span>

#include "core/thread_pool.h"
#include "engine/forward.h"
#include "eval/progress.h"
#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"

namespace kvmem::eval {
namespace {

constexpr int64_t kMaxCount = int64_t{1} << 24;
constexpr int kBlockRows = 256;

// Decimal digits only, no leading zero, 1..max.
bool ParseCount(std::string_view s, int64_t max, int64_t* v) {
  if (s.empty() || s.size() > 10 || s[0] == '0') return false;
  int64_t x = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    x = x * 10 + (c - '0');
  }
  if (x > max) return false;
  *v = x;
  return true;
}

std::vector<std::string_view> SplitCommas(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (true) {
    const size_t j = s.find(',', i);
    parts.push_back(s.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i));
    if (j == std::string_view::npos) return parts;
    i = j + 1;
  }
}

// Sum over k = 1..m of min(k, W) (W <= 0: no window): the rows read by the tokens at positions
// 0..m-1 of one layer.
double RowsReadBefore(int window, int64_t m) {
  const double md = static_cast<double>(m);
  if (window <= 0 || m <= window) return md * (md + 1) / 2;
  const double w = window;
  return w * (w + 1) / 2 + (md - w) * w;
}

int WindowOf(const model::ModelSpec& s, int layer) {
  return layer < static_cast<int>(s.layers.size()) ? s.layers[layer].sliding_window : 0;
}

std::vector<int32_t> RandomTokens(int64_t n, int n_vocab, std::mt19937_64* rng) {
  std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = pick(*rng);
  return t;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One run of the test from a cache of t.depth rows, which it leaves as it found it.
Status RunOnce(const model::Model& m, ThreadPool* pool, kv::KvSequence* seq, const BenchTest& t,
               std::span<const int32_t> tokens, int ubatch, double* seconds) {
  std::vector<float> logits;
  const auto start = std::chrono::steady_clock::now();
  if (t.kind == BenchTest::Kind::kPrompt) {
    KVMEM_RETURN_IF_ERROR(engine::Forward(m, pool, seq, tokens, t.depth, false, &logits, ubatch));
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      KVMEM_RETURN_IF_ERROR(engine::Forward(m, pool, seq, tokens.subspan(i, 1),
                                            t.depth + static_cast<int64_t>(i), false, &logits, 1));
    }
  }
  *seconds = Seconds(start);
  seq->Truncate(t.depth);
  return Status::Ok();
}

// The untimed context of a ...@dD test, in micro-batches, with its progress on stderr.
Status FillDepth(const model::Model& m, ThreadPool* pool, kv::KvSequence* seq, const BenchTest& t,
                 int ubatch, std::mt19937_64* rng) {
  const std::vector<int32_t> tokens = RandomTokens(t.depth, m.spec().n_vocab, rng);
  const WorkModel work(m.spec());
  ProgressLine progress("kvmem bench", t.depth, work.Positions(static_cast<double>(t.depth)));
  const std::string what = "context of " + t.name() + ", " + std::to_string(pool->size()) +
                           (pool->size() == 1 ? " thread" : " threads");
  std::vector<float> logits;
  for (int64_t begin = 0; begin < t.depth; begin += ubatch) {
    const int64_t end = std::min(t.depth, begin + ubatch);
    KVMEM_RETURN_IF_ERROR(engine::Forward(m, pool, seq,
                                          std::span(tokens).subspan(begin, end - begin), begin,
                                          false, &logits, ubatch));
    progress.Update(end, work.Positions(static_cast<double>(end)), what);
  }
  progress.Finish();
  return Status::Ok();
}

// Tokens/s of each timed repetition.
Result<std::vector<double>> RunTest(const model::Model& m, ThreadPool* pool, const BenchTest& t,
                                    const BenchOptions& o) {
  const int64_t rows = t.depth + t.n_tokens;
  kv::KvPool kv(m.kv_geometry(kBlockRows), static_cast<int>((rows + kBlockRows - 1) / kBlockRows),
                o.formats);
  kv::KvSequence seq(&kv);
  // Going back to depth D after each repetition needs the rows a window release would free.
  seq.set_window_release(false);
  std::mt19937_64 rng(o.seed);
  if (t.depth > 0) KVMEM_RETURN_IF_ERROR(FillDepth(m, pool, &seq, t, o.ubatch, &rng));
  const std::vector<int32_t> tokens = RandomTokens(t.n_tokens, m.spec().n_vocab, &rng);
  const std::span<const int32_t> all(tokens);
  double s = 0;
  KVMEM_RETURN_IF_ERROR(RunOnce(
      m, pool, &seq, t, t.kind == BenchTest::Kind::kPrompt ? all : all.first(1), o.ubatch, &s));
  std::vector<double> tps;
  for (int r = 0; r < o.reps; ++r) {
    KVMEM_RETURN_IF_ERROR(RunOnce(m, pool, &seq, t, all, o.ubatch, &s));
    tps.push_back(static_cast<double>(t.n_tokens) / std::max(s, 1e-12));
  }
  return tps;
}

}  // namespace

std::string BenchTest::name() const {
  std::string s = (kind == Kind::kPrompt ? "pp" : "tg") + std::to_string(n_tokens);
  if (depth > 0) s += "@d" + std::to_string(depth);
  return s;
}

Result<BenchTest> ParseBenchTest(std::string_view name) {
  const auto bad = [&](const std::string& why) -> Status {
    return InvalidArgument("bad test name '" + std::string(name) + "': " + why +
                           " (want ppN, tgN, tgN@dD or ppN@dD, e.g. pp512, tg128@d4096)");
  };
  BenchTest t;
  if (name.starts_with("pp")) {
    t.kind = BenchTest::Kind::kPrompt;
  } else if (name.starts_with("tg")) {
    t.kind = BenchTest::Kind::kGenerate;
  } else {
    return bad("it starts with neither pp nor tg");
  }
  const std::string_view rest = name.substr(2);
  const size_t at = rest.find('@');
  if (!ParseCount(rest.substr(0, at), kMaxCount, &t.n_tokens)) {
    return bad("the token count is not a number in 1.." + std::to_string(kMaxCount));
  }
  if (at == std::string_view::npos) return t;
  const std::string_view d = rest.substr(at + 1);
  if (!d.starts_with("d") || !ParseCount(d.substr(1), kMaxCount, &t.depth)) {
    return bad("the depth is not d followed by a number in 1.." + std::to_string(kMaxCount));
  }
  return t;
}

Result<std::vector<BenchTest>> ParseBenchTests(std::string_view list) {
  std::vector<BenchTest> tests;
  for (std::string_view part : SplitCommas(list)) {
    KVMEM_ASSIGN_OR_RETURN(BenchTest t, ParseBenchTest(part));
    tests.push_back(t);
  }
  return tests;
}

std::vector<BenchTest> DefaultBenchTests(const model::ModelSpec& spec) {
  using K = BenchTest::Kind;
  std::vector<BenchTest> tests = {{K::kPrompt, 128, 0},      {K::kPrompt, 512, 0},
                                  {K::kPrompt, 2048, 0},     {K::kGenerate, 128, 0},
                                  {K::kGenerate, 128, 1024}, {K::kGenerate, 128, 4096}};
  const int64_t deepest = std::min<int64_t>(16384, spec.n_ctx_train);
  if (deepest > 4096) tests.push_back({K::kGenerate, 128, deepest});
  return tests;
}

Result<int> ParsePositiveInt(std::string_view text, std::string_view flag, int max) {
  int64_t v = 0;
  // Leading zeros are harmless here; strip them so "08" reads as 8.
  std::string_view digits = text;
  while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
  if (!ParseCount(digits, max, &v)) {
    return InvalidArgument(std::string(flag) + ": '" + std::string(text) +
                           "' is not a whole number in 1.." + std::to_string(max));
  }
  return static_cast<int>(v);
}

Result<std::vector<int>> ParseThreadCounts(std::string_view list) {
  std::vector<int> threads;
  for (std::string_view part : SplitCommas(list)) {
    KVMEM_ASSIGN_OR_RETURN(int n, ParsePositiveInt(part, "--threads", 1024));
    threads.push_back(n);
  }
  return threads;
}

bool BeyondTrainingContext(const BenchTest& t, const model::ModelSpec& spec) {
  return t.depth + t.n_tokens > spec.n_ctx_train;
}

Status CheckBenchTests(const std::vector<BenchTest>& tests, const model::ModelSpec& spec) {
  for (const BenchTest& t : tests) {
    if (t.depth + t.n_tokens > 4 * static_cast<int64_t>(spec.n_ctx_train)) {
      return OutOfRange("test " + t.name() + " needs " + std::to_string(t.depth + t.n_tokens) +
                        " positions, over 4x the model's training context of " +
                        std::to_string(spec.n_ctx_train));
    }
  }
  return Status::Ok();
}

RepStats Summarize(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {median, v.front(), v.back()};
}

double MeanVisibleRows(int sliding_window, int64_t first_pos, int64_t n) {
  if (n <= 0) return 0;
  return (RowsReadBefore(sliding_window, first_pos + n) -
          RowsReadBefore(sliding_window, first_pos)) /
         static_cast<double>(n);
}

int64_t LinearParamsPerLayer(const model::ModelSpec& s) {
  const int64_t d = s.n_embd;
  return d * (s.q_dim() + s.k_dim() + s.v_dim()) + int64_t{s.n_heads} * s.head_dim_v * d +
         s.ffn_params_per_token();
}

double FlopsPerToken(const model::ModelSpec& s, int64_t first_pos, int64_t n, int64_t n_logits) {
  double flops = 2.0 * s.n_layers * static_cast<double>(LinearParamsPerLayer(s)) +
                 2.0 * s.n_vocab * s.n_embd * static_cast<double>(n_logits) / n;
  const double per_row = 2.0 * s.n_heads * (s.head_dim_k + s.head_dim_v);
  for (int l = 0; l < s.n_layers; ++l)
    flops += per_row * MeanVisibleRows(WindowOf(s, l), first_pos, n);
  return flops;
}

size_t DecodeWeightBytes(size_t weight_bytes, size_t tok_embd_bytes, bool tied_output,
                         size_t packed_source_bytes, size_t packed_bytes) {
  // Tied and packed, the LM head's source is the embedding table itself: counted in
  // packed_source_bytes, so it leaves the sum there.
  return (tied_output ? weight_bytes : weight_bytes - tok_embd_bytes) - packed_source_bytes +
         packed_bytes;
}

double KvBytesPerToken(const model::ModelSpec& s, kv::KvFormats formats, int64_t first_pos,
                       int64_t n) {
  const double row = static_cast<double>(
      kv::KvBytesPerTokenLayer(formats, s.n_kv_heads, s.head_dim_k, s.head_dim_v));
  double bytes = 0;
  for (int l = 0; l < s.n_layers; ++l) bytes += row * MeanVisibleRows(WindowOf(s, l), first_pos, n);
  return bytes;
}

double BenchRow::roofline_fraction() const {
  const double limit =
      test.kind == BenchTest::Kind::kPrompt ? roofline.fma_peak_gflops : roofline.bandwidth_gbps;
  return limit > 0 ? achieved() / limit : 0.0;
}

Status RunBench(const model::Model& model, const BenchOptions& o,
                const std::vector<Roofline>& rooflines,
                const std::function<void(const BenchRow&)>& on_row) {
  const model::ModelSpec& spec = model.spec();
  KVMEM_RETURN_IF_ERROR(CheckBenchTests(o.tests, spec));
  KVMEM_RETURN_IF_ERROR(kv::CheckKvFormats(o.formats, spec.head_dim_k, spec.head_dim_v));
  if (rooflines.size() != o.threads.size()) return Internal("one roofline per thread count");
  const kernels::WeightMatrix& embd = model.weights().tok_embd;
  // A decode step reads n_expert_used of each layer's n_expert experts.
  const double unread_experts =
      spec.n_expert == 0 ? 0.0
                         : static_cast<double>(model.expert_bytes()) *
                               (1.0 - static_cast<double>(spec.n_expert_used) / spec.n_expert);
  const double weight_bytes =
      static_cast<double>(DecodeWeightBytes(model.weight_bytes(),
                                            embd.row_bytes * static_cast<size_t>(embd.n_out),
                                            spec.tied_output, model.packed_source_bytes(),
                                            model.packed_bytes())) -
      unread_experts;
  for (size_t i = 0; i < o.threads.size(); ++i) {
    ThreadPool pool(o.threads[i]);
    for (const BenchTest& t : o.tests) {
      auto tps = RunTest(model, &pool, t, o);
      if (!tps.ok()) return tps.status().WithContext(t.name());
      BenchRow row;
      row.test = t;
      row.threads = o.threads[i];
      row.reps = o.reps;
      row.tokens_per_second = Summarize(*tps);
      row.beyond_training_context = BeyondTrainingContext(t, spec);
      row.roofline = rooflines[i];
      row.work_per_token =
          t.kind == BenchTest::Kind::kPrompt
              ? FlopsPerToken(spec, t.depth, t.n_tokens, 1)
              : weight_bytes + KvBytesPerToken(spec, o.formats, t.depth, t.n_tokens);
      on_row(row);
    }
  }
  return Status::Ok();
}

}  // namespace kvmem::eval
