#include "engine/forward_many.h"

#include <algorithm>

#include "engine/forward.h"

namespace kvmem::engine {

namespace {

// A piece whose rows are placed: its tokens are [first, first + rows.size()) of the step.
struct Placed {
  SeqPiece* piece;
  int first;
  std::vector<kv::RowRef> rows;
};

}  // namespace

void ForwardMany(const model::Model& model, ThreadPool* pool, std::span<SeqPiece> pieces,
                 ManyScratch* scratch) {
  const model::ModelSpec& spec = model.spec();
  ManyScratch& s = *scratch;
  s.tokens.clear();
  s.positions.clear();
  std::vector<Placed> placed;
  placed.reserve(pieces.size());
  for (SeqPiece& p : pieces) {
    Batch b;
    b.tokens.assign(p.tokens.begin(), p.tokens.end());
    b.positions.resize(b.tokens.size());
    for (size_t i = 0; i < b.positions.size(); ++i) b.positions[i] = p.first_pos + int64_t(i);
    std::vector<kv::RowRef> rows;
    p.status = PlaceBatch(spec, b, p.seq, &rows);
    if (!p.status.ok()) continue;
    placed.push_back({&p, static_cast<int>(s.tokens.size()), std::move(rows)});
    s.tokens.insert(s.tokens.end(), b.tokens.begin(), b.tokens.end());
    s.positions.insert(s.positions.end(), b.positions.begin(), b.positions.end());
  }
  if (placed.empty()) return;

  const int n = static_cast<int>(s.tokens.size());
  s.block.Resize(spec, n);
  s.x.resize(static_cast<size_t>(n) * spec.n_embd);
  Embed(model, s.tokens, s.x.data());
  const std::span<const int64_t> positions = s.positions;
  for (int l = 0; l < spec.n_layers; ++l) {
    const model::LayerWeights& lw = model.weights().layers[l];
    model::ProjectQkv(spec, l, lw, s.x.data(), positions, s.block, pool);
    for (const Placed& p : placed) {
      model::StoreKv(spec, l, s.block, p.rows, positions.subspan(p.first, p.rows.size()),
                     *p.piece->seq->pool(), p.first);
    }
    s.attend.clear();
    for (const Placed& p : placed) {
      s.attend.push_back({&p.piece->seq->view(), p.piece->seq->pool(),
                          {positions.subspan(p.first, p.rows.size()), {}}, p.first});
    }
    model::AttendMany(spec, l, s.attend, lw.attn_sinks, s.block, pool);
    model::OutputAndFfn(spec, lw, s.x.data(), s.block, pool);
  }

  // One LM head over the rows that give logits, then each piece takes its own.
  const size_t d = spec.n_embd;
  s.x_out.clear();
  for (const Placed& p : placed) {
    const int k = static_cast<int>(p.rows.size());
    const int from = p.piece->all_logits ? p.first : p.first + k - 1;
    s.x_out.insert(s.x_out.end(), s.x.begin() + from * d, s.x.begin() + (p.first + k) * d);
  }
  const int n_out = static_cast<int>(s.x_out.size() / d);
  OutputLogits(model, s.x_out.data(), n_out, &s.block.xn, &s.logits, pool);
  const size_t v = spec.n_vocab;
  size_t at = 0;
  for (const Placed& p : placed) {
    const size_t k = p.piece->all_logits ? p.rows.size() : 1;
    p.piece->logits->assign(s.logits.begin() + at * v, s.logits.begin() + (at + k) * v);
    at += k;
    kv::KvSequence* seq = p.piece->seq;
    if (seq->window_release()) {
      ReleaseOutOfWindow(spec, seq, p.piece->first_pos + static_cast<int64_t>(p.rows.size()));
    }
  }
}

}  // namespace kvmem::engine
