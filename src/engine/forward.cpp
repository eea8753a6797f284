#include "engine/forward.h"

#include <algorithm>
#include <cassert>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace kvmem::engine {

ForwardPass::ForwardPass(const model::Model& model, ThreadPool* pool)
    : model_(model), pool_(pool) {}

Status ForwardPass::Begin(const Batch& batch, kv::KvSequence* seq) {
  const model::ModelSpec& spec = model_.spec();
  const int n = static_cast<int>(batch.tokens.size());
  if (n == 0) return InvalidArgument("empty batch");
  if (batch.positions.size() != batch.tokens.size()) {
    return InvalidArgument("batch has " + std::to_string(n) + " tokens but " +
                           std::to_string(batch.positions.size()) + " positions");
  }
  for (int32_t t : batch.tokens) {
    if (t < 0 || t >= spec.n_vocab) {
      return OutOfRange("token id " + std::to_string(t) + " outside the vocabulary of " +
                        std::to_string(spec.n_vocab));
    }
  }
  // Rows are appended in one go so positions can be arbitrary (not necessarily contiguous).
  std::vector<kv::RowRef> rows;
  rows.reserve(n);
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && batch.positions[j] == batch.positions[j - 1] + 1) ++j;
    KVMEM_ASSIGN_OR_RETURN(std::vector<kv::RowRef> part, seq->AppendRows(j - i, batch.positions[i]));
    rows.insert(rows.end(), part.begin(), part.end());
    i = j;
  }
  seq_ = seq;
  batch_ = batch;
  rows_ = std::move(rows);
  next_layer_ = 0;
  scratch_.Resize(spec, n);
  x_.resize(static_cast<size_t>(n) * spec.n_embd);
  const auto& w = model_.weights();
  for (int t = 0; t < n; ++t) {
    kernels::DequantizeRow(w.tok_embd, batch.tokens[t], x_.data() + static_cast<size_t>(t) * spec.n_embd);
  }
  return Status::Ok();
}

void ForwardPass::StepLayer() {
  assert(!done());
  const model::ModelSpec& spec = model_.spec();
  const int l = next_layer_;
  const model::LayerWeights& lw = model_.weights().layers[l];
  kv::KvPool& kv = *seq_->pool();
  model::ProjectQkv(spec, lw, x_.data(), batch_.positions, scratch_, pool_);
  model::StoreKv(spec, l, scratch_, rows_, batch_.positions, kv);
  if (tap_) tap_(l, scratch_.q, scratch_.n_tokens);
  model::Attend(spec, l, seq_->view(), kv, scratch_, pool_);
  model::OutputAndFfn(spec, lw, x_.data(), scratch_, pool_);
  ++next_layer_;
}

void ForwardPass::Finish(std::vector<float>* logits) {
  assert(done());
  const model::ModelSpec& spec = model_.spec();
  const auto& w = model_.weights();
  const int n = scratch_.n_tokens;
  const int first = batch_.all_logits ? 0 : n - 1;
  const int n_out = n - first;
  std::vector<float>& xn = scratch_.xn;
  for (int t = first; t < n; ++t) {
    kernels::Ops().rms_norm(x_.data() + static_cast<size_t>(t) * spec.n_embd, w.output_norm.data(),
                            xn.data() + static_cast<size_t>(t - first) * spec.n_embd, spec.n_embd,
                            spec.rms_eps);
  }
  logits->resize(static_cast<size_t>(n_out) * spec.n_vocab);
  kernels::MatMul(w.output, xn.data(), n_out, logits->data(), pool_);
}

Status Forward(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
               std::span<const int32_t> tokens, int64_t first_pos, bool all_logits,
               std::vector<float>* logits, int max_batch) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return InvalidArgument("no tokens to evaluate");
  const size_t n_vocab = static_cast<size_t>(model.spec().n_vocab);
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
    const bool last = end == n;
    if (!all_logits && !last) {
      // Only the final micro-batch's last token needs logits; skip the LM head here.
      KVMEM_RETURN_IF_ERROR(fp.Begin(b, seq));
      while (!fp.done()) fp.StepLayer();
      continue;
    }
    KVMEM_RETURN_IF_ERROR(fp.Begin(b, seq));
    while (!fp.done()) fp.StepLayer();
    fp.Finish(&part);
    logits->insert(logits->end(), part.begin(), part.end());
  }
  assert(logits->size() % n_vocab == 0);
  (void)n_vocab;
  return Status::Ok();
}

}  // namespace kvmem::engine
