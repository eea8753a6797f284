// The measured loss of KV storage formats: a window of token ids runs through the model once
// with the F16 KV cache (the reference) and once per format under test, in lockstep, micro-batch
// by micro-batch, so only (micro_batch, n_vocab) logits per format are alive at a time (all
// logits of an 8K window of a 49K vocabulary would be 1.6 GB). Every position but the last is
// scored: the NLL of the true next token under each format and KL(P_f16 || P_format) of the full
// next-token distributions (eval/metrics.h).
//
//   auto ev = KvQuantEvaluator::Create(model, &threads, *ParseKvVariants("q8_0,q4_0"), 8192);
//   (*ev)->AddWindow(window_ids, progress);   // as many windows as wanted; sums accumulate
//   (*ev)->reference().sums.perplexity(); (*ev)->results()[i].sums.mean_kl();
//
// Not thread-safe (the ThreadPool parallelizes inside the forward passes and the metrics).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "eval/metrics.h"
#include "kv/kv_format.h"
#include "kv/kv_pool.h"
#include "model/model.h"

namespace kvmem::eval {

// One KV storage configuration: the formats of K and of V.
struct KvVariant {
  kv::KvFormats formats;
  // "q8_0" when K and V share a format, else "q8_0/q4_0" (K/V).
  std::string name() const;
};

// "q8_0" -> q8_0 for K and V; "q8_0:q4_0" or "q8_0/q4_0" -> K q8_0, V q4_0.
Result<KvVariant> ParseKvVariant(std::string_view spec);
// A comma-separated list of specs.
Result<std::vector<KvVariant>> ParseKvVariants(std::string_view list);

struct VariantResult {
  KvVariant variant;
  MetricSums sums;  // over every scored position of every window
  double bytes_per_token = 0;  // KV bytes of one token, all layers, K and V
};

// Where evaluation windows of n_ctx tokens come from: window w is the chunk
// [chunk * n_ctx, (chunk + 1) * n_ctx) of document `doc`'s token ids. Documents are taken in
// turn (first chunks of documents 0, 1, ..., then their second chunks, ...), so windows come
// from different conversations as long as there are enough; chunks that do not fit whole are
// skipped. OutOfRange when fewer than `count` windows fit.
struct WindowRef {
  size_t doc = 0;
  int64_t begin = 0;
};
Result<std::vector<WindowRef>> PlanWindows(std::span<const int64_t> doc_tokens, int64_t n_ctx,
                                           int count);

class KvQuantEvaluator {
 public:
  // Called after each micro-batch with the token rows run so far (all formats counted).
  using Progress = std::function<void(int64_t rows_done)>;

  // `variants` are the formats under test (the F16 reference is always run first and is not
  // listed); max_tokens bounds the window length (sizes the KV pools). InvalidArgument when a
  // format cannot store the model's heads or a size is not positive.
  static Result<std::unique_ptr<KvQuantEvaluator>> Create(const model::Model& model,
                                                          ThreadPool* threads,
                                                          std::vector<KvVariant> variants,
                                                          int max_tokens, int micro_batch = 256);
  ~KvQuantEvaluator();

  // Runs one window of token ids at positions 0.. and adds its scored positions (all but the
  // last) to the sums. InvalidArgument for fewer than 2 or more than max_tokens tokens, or ids
  // outside the vocabulary.
  Status AddWindow(std::span<const int32_t> tokens, const Progress& progress = {});

  // The reference's NLL sums (its KL is 0 by definition).
  const VariantResult& reference() const { return reference_; }
  const std::vector<VariantResult>& results() const { return results_; }
  // Token rows one window of n tokens costs (for progress totals).
  int64_t rows_per_window(int64_t n_tokens) const {
    return n_tokens * static_cast<int64_t>(1 + results_.size());
  }

 private:
  KvQuantEvaluator(const model::Model& model, ThreadPool* threads, std::vector<KvVariant> variants,
                   int max_tokens, int micro_batch);
  // Scores rows [0, n_rows) of `logits` against the reference rows; target of row j is
  // targets[j].
  void Score(std::span<const float> logits, std::span<const int32_t> targets, MetricSums* sums);

  const model::Model& model_;
  ThreadPool* threads_;
  int max_tokens_;
  int micro_batch_;
  VariantResult reference_;
  std::vector<VariantResult> results_;
  std::vector<std::unique_ptr<kv::KvPool>> pools_;  // [0] reference, [1 + i] results_[i]
  std::vector<float> ref_logits_;                   // (micro_batch, n_vocab)
  std::vector<double> ref_lse_;                     // (micro_batch)
  std::vector<float> logits_;                       // (micro_batch, n_vocab)
  std::vector<double> row_nll_, row_kl_;            // (micro_batch)
};

}  // namespace kvmem::eval
