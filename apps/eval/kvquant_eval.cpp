#include "eval/kvquant_eval.h"

#include <algorithm>
#include <cassert>

#include "engine/forward.h"
#include "kv/kv_sequence.h"

namespace kvmem::eval {
namespace {

constexpr int kBlockRows = 256;

}  // namespace

std::string KvVariant::name() const {
  const std::string k = kv::KvFormatName(formats.k), v = kv::KvFormatName(formats.v);
  return k == v ? k : k + "/" + v;
}

Result<KvVariant> ParseKvVariant(std::string_view spec) {
  const size_t sep = spec.find_first_of(":/");
  const std::string_view k = spec.substr(0, sep);
  const std::string_view v = sep == std::string_view::npos ? k : spec.substr(sep + 1);
  KvVariant out;
  auto fk = kv::ParseKvFormat(k);
  if (!fk.ok()) return fk.status().WithContext("KV format '" + std::string(spec) + "'");
  auto fv = kv::ParseKvFormat(v);
  if (!fv.ok()) return fv.status().WithContext("KV format '" + std::string(spec) + "'");
  out.formats.k = *fk;
  out.formats.v = *fv;
  return out;
}

Result<std::vector<KvVariant>> ParseKvVariants(std::string_view list) {
  std::vector<KvVariant> out;
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string_view::npos) j = list.size();
    KVMEM_ASSIGN_OR_RETURN(KvVariant v, ParseKvVariant(list.substr(i, j - i)));
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

Result<std::vector<WindowRef>> PlanWindows(std::span<const int64_t> doc_tokens, int64_t n_ctx,
                                           int count) {
  std::vector<WindowRef> out;
  if (n_ctx <= 0 || count <= 0) return out;
  int64_t longest = 0;
  for (int64_t t : doc_tokens) longest = std::max(longest, t);
  for (int64_t chunk = 0; (chunk + 1) * n_ctx <= longest; ++chunk) {
    for (size_t d = 0; d < doc_tokens.size(); ++d) {
      if ((chunk + 1) * n_ctx > doc_tokens[d]) continue;
      out.push_back({d, chunk * n_ctx});
      if (static_cast<int>(out.size()) == count) return out;
    }
  }
  return OutOfRange("only " + std::to_string(out.size()) + " windows of " +
                    std::to_string(n_ctx) + " tokens fit in the data; " +
                    std::to_string(count) + " asked for");
}

Result<std::unique_ptr<KvQuantEvaluator>> KvQuantEvaluator::Create(
    const model::Model& model, ThreadPool* threads, std::vector<KvVariant> variants,
    int max_tokens, int micro_batch) {
  if (max_tokens <= 0 || micro_batch <= 0) {
    return InvalidArgument("window length and micro-batch must be positive");
  }
  const kv::KvGeometry g = model.kv_geometry(kBlockRows);
  for (const KvVariant& v : variants) {
    Status st = kv::CheckKvFormats(v.formats, g.head_dim_k, g.head_dim_v);
    if (!st.ok()) return st.WithContext("KV format " + v.name());
  }
  return std::unique_ptr<KvQuantEvaluator>(
      new KvQuantEvaluator(model, threads, std::move(variants), max_tokens, micro_batch));
}

KvQuantEvaluator::KvQuantEvaluator(const model::Model& model, ThreadPool* threads,
                                   std::vector<KvVariant> variants, int max_tokens,
                                   int micro_batch)
    : model_(model), threads_(threads), max_tokens_(max_tokens), micro_batch_(micro_batch) {
  assert(max_tokens > 0 && micro_batch > 0);
  const int max_blocks = (max_tokens + kBlockRows - 1) / kBlockRows;
  auto make_pool = [&](const KvVariant& v) {
    pools_.push_back(
        std::make_unique<kv::KvPool>(model.kv_geometry(kBlockRows), max_blocks, v.formats));
    return static_cast<double>(pools_.back()->bytes_per_token());
  };
  reference_.variant.formats = {kv::KvFormat::kF16, kv::KvFormat::kF16};
  reference_.bytes_per_token = make_pool(reference_.variant);
  for (const KvVariant& v : variants) {
    VariantResult r;
    r.variant = v;
    r.bytes_per_token = make_pool(v);
    results_.push_back(std::move(r));
  }
}

KvQuantEvaluator::~KvQuantEvaluator() = default;

Status KvQuantEvaluator::AddWindow(std::span<const int32_t> tokens, const Progress& progress) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2 || n > max_tokens_) {
    return InvalidArgument("a window needs 2.." + std::to_string(max_tokens_) + " tokens, got " +
                           std::to_string(n));
  }
  const int n_vocab = model_.spec().n_vocab;
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab) {
      return InvalidArgument("token id " + std::to_string(t) + " outside the vocabulary of " +
                             std::to_string(n_vocab));
    }
  }
  // One sequence per pool; destroying them at the end frees the window's blocks.
  std::vector<std::unique_ptr<kv::KvSequence>> seqs;
  for (auto& p : pools_) seqs.push_back(std::make_unique<kv::KvSequence>(p.get()));

  std::vector<MetricSums> window(results_.size());
  MetricSums ref_window;
  int64_t rows_done = 0;
  for (int64_t b = 0; b < n; b += micro_batch_) {
    const int64_t e = std::min<int64_t>(n, b + micro_batch_);
    const std::span<const int32_t> chunk = tokens.subspan(b, e - b);
    // Rows scored in this chunk: those with a next token inside the window.
    const int64_t n_scored = std::min<int64_t>(e, n - 1) - b;
    const std::span<const int32_t> targets = tokens.subspan(b + 1, n_scored);

    KVMEM_RETURN_IF_ERROR(engine::Forward(model_, threads_, seqs[0].get(), chunk, b,
                                          /*all_logits=*/true, &ref_logits_, micro_batch_));
    rows_done += e - b;
    ref_lse_.resize(n_scored);
    row_nll_.resize(n_scored);
    threads_->ParallelFor(n_scored, 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        std::span<const float> row(ref_logits_.data() + r * n_vocab, n_vocab);
        ref_lse_[r] = LogSumExp(row);
        row_nll_[r] = ref_lse_[r] - row[targets[r]];
      }
    });
    for (int64_t r = 0; r < n_scored; ++r) ref_window.Add(row_nll_[r], 0.0);
    if (progress) progress(rows_done);

    for (size_t i = 0; i < results_.size(); ++i) {
      KVMEM_RETURN_IF_ERROR(engine::Forward(model_, threads_, seqs[1 + i].get(), chunk, b,
                                            /*all_logits=*/true, &logits_, micro_batch_));
      rows_done += e - b;
      Score(logits_, targets, &window[i]);
      if (progress) progress(rows_done);
    }
  }
  reference_.sums.Merge(ref_window);
  for (size_t i = 0; i < results_.size(); ++i) results_[i].sums.Merge(window[i]);
  return Status::Ok();
}

void KvQuantEvaluator::Score(std::span<const float> logits, std::span<const int32_t> targets,
                             MetricSums* sums) {
  const int n_vocab = model_.spec().n_vocab;
  const int64_t n_scored = static_cast<int64_t>(targets.size());
  row_nll_.resize(n_scored);
  row_kl_.resize(n_scored);
  threads_->ParallelFor(n_scored, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      std::span<const float> ref(ref_logits_.data() + r * n_vocab, n_vocab);
      std::span<const float> row(logits.data() + r * n_vocab, n_vocab);
      const double lse = LogSumExp(row);
      row_nll_[r] = lse - row[targets[r]];
      row_kl_[r] = KlDivergence(ref, ref_lse_[r], row, lse);
    }
  });
  // Summed in position order, so the result does not depend on the thread count.
  for (int64_t r = 0; r < n_scored; ++r) sums->Add(row_nll_[r], row_kl_[r]);
}

}  // namespace kvmem::eval
