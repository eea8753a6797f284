#include "engine/forward.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace kvmem::engine {

int TapContext::n_tokens() const { return static_cast<int>(fp_->tokens_.size()); }
std::span<const int64_t> TapContext::positions() const { return fp_->positions_; }
std::span<const float> TapContext::q() const {
  return {fp_->scratch_.q.data(), fp_->tokens_.size() * fp_->model_.spec().q_dim()};
}

void TapContext::AttentionWeights(int t, int h, std::vector<float>* weights,
                                  std::vector<kv::RowRef>* rows) const {
  const model::ModelSpec& spec = fp_->model_.spec();
  const int g = h / (spec.n_heads / spec.n_kv_heads);
  std::vector<kernels::KvSpan> spans;
  std::vector<model::RowRange> ranges;
  const kv::KvPool& kv = *fp_->seq_->pool();
  model::CollectVisible(fp_->seq_->view(), kv, layer_, g, spec.layers[layer_].sliding_window,
                        fp_->visibility(), t, &spans, &ranges);
  rows->clear();
  for (const model::RowRange& r : ranges) {
    for (int32_t i = 0; i < r.n_rows; ++i) rows->push_back({r.block, r.first_row + i});
  }
  weights->resize(rows->size());
  const float* q = fp_->scratch_.q.data() + static_cast<size_t>(t) * spec.q_dim() +
                   static_cast<size_t>(h) * spec.head_dim_k;
  kv.AttentionWeights(q, spans.data(), static_cast<int>(spans.size()), spec.attn_scale(),
                      weights->data());
}

ForwardPass::ForwardPass(const model::Model& model, ThreadPool* pool)
    : model_(model), pool_(pool) {}

namespace {

// Adds rows to sorted, non-overlapping ranges, merging neighbours.
void AddRows(std::vector<model::RowRange>* ranges, std::span<const kv::RowRef> rows) {
  for (const kv::RowRef& r : rows) ranges->push_back({r.block, r.row, 1});
  std::sort(ranges->begin(), ranges->end(), [](const model::RowRange& a, const model::RowRange& b) {
    return a.block != b.block ? a.block < b.block : a.first_row < b.first_row;
  });
  std::vector<model::RowRange> merged;
  for (const model::RowRange& r : *ranges) {
    if (!merged.empty() && merged.back().block == r.block &&
        merged.back().first_row + merged.back().n_rows >= r.first_row) {
      const int32_t end =
          std::max(merged.back().first_row + merged.back().n_rows, r.first_row + r.n_rows);
      merged.back().n_rows = end - merged.back().first_row;
    } else {
      merged.push_back(r);
    }
  }
  ranges->swap(merged);
}

}  // namespace

Status PlaceBatch(const model::ModelSpec& spec, const Batch& batch, kv::KvSequence* seq,
                  std::vector<kv::RowRef>* placed) {
  const size_t n = batch.tokens.size();
  if (n == 0) return InvalidArgument("empty batch");
  if (batch.positions.size() != n) {
    return InvalidArgument("batch has " + std::to_string(n) + " tokens but " +
                           std::to_string(batch.positions.size()) + " positions");
  }
  if (!batch.rows.empty() && batch.rows.size() != n) {
    return InvalidArgument("batch gives rows for some tokens but not all");
  }
  if (!batch.visible.empty() && batch.visible.size() != n) {
    return InvalidArgument("batch gives visibility for some tokens but not all");
  }
  if (!batch.rows.empty() && !batch.persist) {
    return InvalidArgument("a batch that overwrites existing rows cannot be non-persistent");
  }
  for (int32_t t : batch.tokens) {
    if (t < 0 || t >= spec.n_vocab) {
      return OutOfRange("token id " + std::to_string(t) + " outside the vocabulary of " +
                        std::to_string(spec.n_vocab));
    }
  }
  for (const kv::RowRef& r : batch.rows) {
    if (!seq->Owns(r)) {
      return InvalidArgument("row (" + std::to_string(r.block) + ", " + std::to_string(r.row) +
                             ") does not belong to the sequence");
    }
  }
  // Sliding-window layers may have given back rows these tokens would read.
  for (int l = 0; l < spec.n_layers; ++l) {
    const int64_t released = seq->released_through(l);
    const int window = spec.layers[l].sliding_window;
    if (released == kv::kNoPosition || window <= 0) continue;
    for (int64_t p : batch.positions) {
      if (p - window < released) {
        return FailedPrecondition(
            "position " + std::to_string(p) + " needs rows of sliding-window layer " +
            std::to_string(l) + " at positions <= " + std::to_string(released) +
            ", which the sequence released (recompute from an earlier point, or turn window "
            "release off for policies that re-place history)");
      }
    }
  }
  const int64_t rows_before = seq->n_rows();
  std::vector<kv::RowRef> rows = batch.rows;
  if (rows.empty()) {
    // Appended in runs of consecutive positions, so positions may jump.
    rows.reserve(n);
    for (size_t i = 0; i < n;) {
      size_t j = i + 1;
      while (j < n && batch.positions[j] == batch.positions[j - 1] + 1) ++j;
      auto part = seq->AppendRows(static_cast<int>(j - i), batch.positions[i]);
      if (!part.ok()) {
        seq->Truncate(rows_before);
        return part.status();
      }
      rows.insert(rows.end(), part->begin(), part->end());
      i = j;
    }
  }
  for (const kv::RowRef& r : rows) {
    if (!seq->pool()->has_all_layers(r.block)) {
      seq->Truncate(rows_before);
      return FailedPrecondition("block " + std::to_string(r.block) +
                                " lost sliding-window layer storage; its rows cannot be written");
    }
  }
  *placed = std::move(rows);
  return Status::Ok();
}

Status ForwardPass::Begin(const Batch& batch, kv::KvSequence* seq) {
  const model::ModelSpec& spec = model_.spec();
  const size_t n = batch.tokens.size();
  rows_before_ = seq->n_rows();
  std::vector<kv::RowRef> rows;
  KVMEM_RETURN_IF_ERROR(PlaceBatch(spec, batch, seq, &rows));
  seq_ = seq;
  tokens_ = batch.tokens;
  positions_ = batch.positions;
  rows_ = std::move(rows);
  all_logits_ = batch.all_logits;
  persist_ = batch.persist;
  allowed_ = batch.visible;
  for (auto& a : allowed_) AddRows(&a, rows_);
  next_layer_ = 0;
  scratch_.Resize(spec, static_cast<int>(n));
  x_.resize(n * spec.n_embd);
  Embed(model_, tokens_, x_.data());
  return Status::Ok();
}

void Embed(const model::Model& model, std::span<const int32_t> tokens, float* x) {
  const model::ModelSpec& spec = model.spec();
  for (size_t t = 0; t < tokens.size(); ++t) {
    float* row = x + t * spec.n_embd;
    kernels::DequantizeRow(model.weights().tok_embd, tokens[t], row);
    if (spec.embd_scale != 1.0f) {
      for (int i = 0; i < spec.n_embd; ++i) row[i] *= spec.embd_scale;
    }
  }
}

void ForwardPass::StepLayer() {
  assert(!done());
  const model::ModelSpec& spec = model_.spec();
  const int l = next_layer_;
  const model::LayerWeights& lw = model_.weights().layers[l];
  kv::KvPool& kv = *seq_->pool();
  model::ProjectQkv(spec, l, lw, x_.data(), positions_, scratch_, pool_);
  model::StoreKv(spec, l, scratch_, rows_, positions_, kv);
  if (tap_) tap_(TapContext(this, l));
  model::Attend(spec, l, seq_->view(), kv, visibility(), lw.attn_sinks, scratch_, pool_);
  model::OutputAndFfn(spec, lw, x_.data(), scratch_, pool_);
  ++next_layer_;
  if (done() && persist_ && seq_->window_release()) ReleaseOutOfWindow();
}

void ForwardPass::ReleaseOutOfWindow() {
  // Later tokens come after this batch. (Positions of later batches are checked against the
  // release in Begin.)
  engine::ReleaseOutOfWindow(model_.spec(), seq_,
                             *std::max_element(positions_.begin(), positions_.end()) + 1);
}

void ReleaseOutOfWindow(const model::ModelSpec& spec, kv::KvSequence* seq, int64_t next) {
  // A local layer never again reads rows at positions <= next - window.
  for (int l = 0; l < spec.n_layers; ++l) {
    const int window = spec.layers[l].sliding_window;
    if (window > 0) seq->ReleaseLayerThrough(l, next - window);
  }
}

Status ForwardPass::KeepTokens(std::span<const int> indices) {
  const int n = static_cast<int>(tokens_.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= n || (i > 0 && indices[i] <= indices[i - 1])) {
      return InvalidArgument("KeepTokens: indices must be ascending and within the batch");
    }
  }
  if (indices.empty()) return InvalidArgument("KeepTokens: at least one token must remain");
  const size_t d = model_.spec().n_embd;
  for (size_t i = 0; i < indices.size(); ++i) {
    const size_t k = indices[i];
    tokens_[i] = tokens_[k];
    positions_[i] = positions_[k];
    rows_[i] = rows_[k];
    if (!allowed_.empty()) allowed_[i] = std::move(allowed_[k]);
    std::copy_n(x_.begin() + k * d, d, x_.begin() + i * d);
  }
  const size_t m = indices.size();
  tokens_.resize(m);
  positions_.resize(m);
  rows_.resize(m);
  if (!allowed_.empty()) allowed_.resize(m);
  x_.resize(m * d);
  scratch_.Resize(model_.spec(), static_cast<int>(m));
  return Status::Ok();
}

void ForwardPass::Finish(std::vector<float>* logits) {
  assert(done());
  const int n = static_cast<int>(tokens_.size());
  const int first = all_logits_ ? 0 : n - 1;
  OutputLogits(model_, x_.data() + static_cast<size_t>(first) * model_.spec().n_embd, n - first,
               &scratch_.xn, logits, pool_);
  if (!persist_) seq_->Truncate(rows_before_);
}

void OutputLogits(const model::Model& model, const float* x, int n, std::vector<float>* xn,
                  std::vector<float>* logits, ThreadPool* pool) {
  const model::ModelSpec& spec = model.spec();
  const auto& w = model.weights();
  xn->resize(std::max(xn->size(), static_cast<size_t>(n) * spec.n_embd));
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * spec.n_embd;
    kernels::Ops().rms_norm(x + off, w.output_norm.data(), xn->data() + off, spec.n_embd,
                            spec.rms_eps);
  }
  logits->resize(static_cast<size_t>(n) * spec.n_vocab);
  kernels::MatMul(w.output, xn->data(), n, logits->data(), pool);
  if (const float cap = spec.final_logit_softcap; cap > 0.0f) {
    for (float& v : *logits) v = cap * std::tanh(v / cap);
  }
}

Status Forward(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
               std::span<const int32_t> tokens, int64_t first_pos, bool all_logits,
               std::vector<float>* logits, int max_batch) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return InvalidArgument("no tokens to evaluate");
  logits->clear();
  ForwardPass fp(model, pool);
  std::vector<float> part;
  for (int64_t begin = 0; begin < n; begin += max_batch) {
    const int64_t end = std::min(n, begin + max_batch);
    Batch b;
    b.tokens.assign(tokens.begin() + begin, tokens.begin() + end);
    b.positions.resize(end - begin);
    for (int64_t i = begin; i < end; ++i) b.positions[i - begin] = first_pos + i;
    b.all_logits = all_logits;
    KVMEM_RETURN_IF_ERROR(fp.Begin(b, seq));
    while (!fp.done()) fp.StepLayer();
    // Only the final micro-batch's last token needs logits unless all are asked for.
    if (all_logits || end == n) {
      fp.Finish(&part);
      logits->insert(logits->end(), part.begin(), part.end());
    }
  }
  return Status::Ok();
}

}  // namespace kvmem::engine
