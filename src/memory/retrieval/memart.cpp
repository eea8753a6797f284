#include "memory/retrieval/memart.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <map>

#include "engine/forward.h"
#include "kernels/ops.h"

namespace kvmem::memory {
namespace {

// The index of the first of `rows` that is outside [0, limit) or not above the one before it;
// -1 when there is none.
int64_t FirstNotAscending(std::span<const int64_t> rows, int64_t limit) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= limit || (i > 0 && rows[i] <= rows[i - 1])) return i;
  }
  return -1;
}

}  // namespace

Status ValidateMemArtConfig(const MemArtConfig& c) {
  if (c.block_size != 8 && c.block_size != 16 && c.block_size != 32) {
    return InvalidArgument("memart: block size " + std::to_string(c.block_size) + " (8, 16 or 32)");
  }
  if (c.top_k < 0) return InvalidArgument("memart: top_k must be >= 0");
  if (c.keep_first < 0 || c.keep_last < 0) {
    return InvalidArgument("memart: keep_first and keep_last must be >= 0");
  }
  if (!(c.strategy.rr_c >= 0)) return InvalidArgument("memart: rr_c must be >= 0");
  if (c.neighbors < 0 || c.neighbors > 8) {
    return InvalidArgument("memart: neighbors " + std::to_string(c.neighbors) + " (0 to 8)");
  }
  if (c.whole_turns && (c.retrieval_heads.empty() || c.neighbors > 0)) {
    return InvalidArgument("memart: whole turns need retrieval heads and no neighbours");
  }
  return Status::Ok();
}

std::string HeadRefName(HeadRef h) {
  return std::to_string(h.layer) + "." + std::to_string(h.head);
}

Result<HeadRef> ParseHeadRef(std::string_view s) {
  auto number = [](std::string_view t, int* out) {
    if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string_view::npos) {
      return false;
    }
    *out = std::stoi(std::string(t));
    return true;
  };
  const size_t dot = s.find('.');
  HeadRef h;
  if (dot == std::string_view::npos || !number(s.substr(0, dot), &h.layer) ||
      !number(s.substr(dot + 1), &h.head)) {
    return InvalidArgument("'" + std::string(s.substr(0, 32)) + "' is not LAYER.HEAD (e.g. 7.1)");
  }
  return h;
}

std::vector<std::pair<int64_t, int>> RetrievalReport::BlockVotes() const {
  std::map<int64_t, int> votes;
  for (const std::vector<int64_t>& layer : blocks) {
    for (int64_t b : layer) ++votes[b];
  }
  return {votes.begin(), votes.end()};
}

std::vector<RowSpan> RetrievalReport::RowsRead() const {
  std::vector<RowSpan> all;
  for (const std::vector<RowSpan>& layer : rows) all.insert(all.end(), layer.begin(), layer.end());
  std::sort(all.begin(), all.end(),
            [](const RowSpan& a, const RowSpan& b) { return a.begin < b.begin; });
  std::vector<RowSpan> merged;
  for (const RowSpan& s : all) {
    if (!merged.empty() && s.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, s.end);
    } else {
      merged.push_back(s);
    }
  }
  return merged;
}

Result<std::unique_ptr<MemArtMemory>> MemArtMemory::Create(const model::Model& model,
                                                           kv::KvPool* pool, MemArtConfig config) {
  if (Status st = ValidateMemArtConfig(config); !st.ok()) return st;
  KVMEM_RETURN_IF_ERROR(CheckHeads(model.spec(), config));
  if (pool->layout().k == kernels::KType::kKivi4) {
    return Unsupported("memart: kivi4 K is not supported (working rows are written out of order)");
  }
  return std::unique_ptr<MemArtMemory>(new MemArtMemory(model, pool, config));
}

Result<std::unique_ptr<MemArtMemory>> MemArtMemory::Restore(
    const model::Model& model, kv::KvPool* pool, MemArtConfig config,
    std::unique_ptr<kv::KvSequence> history, std::span<const int64_t> turn_starts) {
  KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<MemArtMemory> mem, Create(model, pool, config));
  if (history->pool() != pool) return InvalidArgument("memart: the history is in another pool");
  if (const int64_t bad = FirstNotAscending(turn_starts, history->n_rows()); bad >= 0) {
    return Corrupt("memart: turn start " + std::to_string(turn_starts[bad]) +
                   " is not ascending within the history of " +
                   std::to_string(history->n_rows()) + " rows");
  }
  for (int l = 0; l < model.spec().n_layers; ++l) {
    if (history->released_through(l) != kv::kNoPosition) {
      return Corrupt("memart: the stored history released rows of layer " + std::to_string(l));
    }
  }
  const int block_rows = pool->geometry().block_rows;
  std::vector<kv::RowRef> rows;
  rows.reserve(history->n_rows());
  for (int64_t i = 0; i < history->n_rows(); ++i) {
    const kv::RowRef row{history->blocks()[i / block_rows], static_cast<int32_t>(i % block_rows)};
    if (pool->rotated_pos(row) != i) {
      return Corrupt("memart: stored history row " + std::to_string(i) + " is at position " +
                     std::to_string(pool->rotated_pos(row)));
    }
    rows.push_back(row);
  }
  history->set_window_release(false);
  mem->history_ = std::move(history);
  mem->history_rows_ = std::move(rows);
  if (mem->history_rows() > 0) mem->turn_starts_ = {0};
  for (int64_t s : turn_starts) {
    if (s > 0) mem->turn_starts_.push_back(s);
  }
  for (int64_t i = 0; i < static_cast<int64_t>(mem->history_rows_.size()); ++i) {
    mem->IndexRow(mem->history_rows_[i], i);
  }
  return mem;
}

MemArtMemory::MemArtMemory(const model::Model& model, kv::KvPool* pool, MemArtConfig config)
    : model_(model),
      pool_(pool),
      config_(config),
      rope_(model.rope_specs()),
      history_(std::make_unique<kv::KvSequence>(pool)),
      index_(model.spec().n_layers, model.spec().n_kv_heads, model.spec().head_dim_k),
      working_(std::make_unique<kv::KvSequence>(pool)) {
  history_->set_window_release(false);
  working_->set_window_release(false);
}

MemArtMemory::~MemArtMemory() = default;

Status MemArtMemory::Reconfigure(const MemArtConfig& config) {
  if (Status st = ValidateMemArtConfig(config); !st.ok()) return st;
  KVMEM_RETURN_IF_ERROR(CheckHeads(model_.spec(), config));
  if (config.block_size != config_.block_size) {
    return InvalidArgument("memart: the block size of an existing history cannot change");
  }
  if (in_turn_) return FailedPrecondition("memart: reconfigured inside a turn");
  config_ = config;
  return Status::Ok();
}

RowSpan MemArtMemory::TurnRows(int64_t block) const {
  const int64_t first_row = block * config_.block_size;
  const int64_t last_row = first_row + BlockRows(block) - 1;
  // The turn holding first_row begins at the last start <= it; the one holding last_row ends
  // before the first start > it.
  auto after_last = std::upper_bound(turn_starts_.begin(), turn_starts_.end(), last_row);
  auto after_first = std::upper_bound(turn_starts_.begin(), turn_starts_.end(), first_row);
  const int64_t begin = after_first == turn_starts_.begin() ? 0 : *(after_first - 1);
  const int64_t end = after_last == turn_starts_.end() ? history_rows() : *after_last;
  return {begin, end};
}

BlockSpan MemArtMemory::TurnBlocks(int64_t block) const {
  const RowSpan t = TurnRows(block);
  return {t.begin / config_.block_size, (t.end - 1) / config_.block_size};
}

std::vector<RowSpan> MemArtMemory::SpansOf(const std::vector<int64_t>& blocks) const {
  std::vector<RowSpan> spans;
  for (int64_t b : blocks) {
    const RowSpan s{b * config_.block_size, b * config_.block_size + BlockRows(b)};
    if (!spans.empty() && spans.back().end == s.begin) {
      spans.back().end = s.end;
    } else {
      spans.push_back(s);
    }
  }
  return spans;
}

std::vector<RowSpan> MemArtMemory::WholeTurns(const std::vector<int64_t>& kept,
                                              const std::vector<int64_t>& candidates,
                                              const std::vector<double>& score,
                                              int64_t budget) const {
  const int64_t full = budget;
  std::vector<char> read(history_rows(), 0);
  for (const RowSpan& s : SpansOf(kept)) std::fill(read.begin() + s.begin, read.begin() + s.end, 1);
  auto unread = [&](RowSpan s) {
    return std::count(read.begin() + s.begin, read.begin() + s.end, 0);
  };
  std::vector<int64_t> order = candidates;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  for (int64_t b : order) {
    if (budget <= 0) break;
    RowSpan take = TurnRows(b);
    if (take.end - take.begin > full) {  // longer than the whole budget: its block alone
      take = {b * config_.block_size, b * config_.block_size + BlockRows(b)};
    }
    const int64_t fresh = unread(take);
    if (fresh > budget) continue;
    std::fill(read.begin() + take.begin, read.begin() + take.end, 1);
    budget -= fresh;
  }
  std::vector<RowSpan> spans;
  for (int64_t r = 0; r < history_rows(); ++r) {
    if (!read[r]) continue;
    if (!spans.empty() && spans.back().end == r) {
      ++spans.back().end;
    } else {
      spans.push_back({r, r + 1});
    }
  }
  return spans;
}

int64_t MemArtMemory::BlockRows(int64_t block) const {
  const int64_t bs = config_.block_size;
  return std::min(bs, history_rows() - block * bs);
}

void MemArtMemory::PartitionBlocks(std::vector<int64_t>* kept,
                                   std::vector<int64_t>* candidates) const {
  const int64_t nb = n_blocks();
  const int64_t bs = config_.block_size;
  const int64_t first = std::min(nb, (config_.keep_first + bs - 1) / bs);
  int64_t last = std::min(nb, (config_.keep_last + bs - 1) / bs);
  if (nb > 0 && BlockRows(nb - 1) < bs) last = std::max<int64_t>(last, 1);  // partial: kept
  kept->clear();
  candidates->clear();
  for (int64_t b = 0; b < nb; ++b) {
    (b < first || b >= nb - last ? kept : candidates)->push_back(b);
  }
}

int64_t MemArtMemory::next_position() const {
  return first_query_pos_ + (working_->n_rows() - static_cast<int64_t>(working_rows_.size()));
}

namespace {

// Rotates k (n_kv_heads, head_dim) by `delta` positions with one layer's RoPE.
void Rotate(float* k, const model::ModelSpec& spec, const kv::RopeSpec& rope, int64_t delta) {
  if (delta == 0 || rope.rot_dim == 0) return;
  kernels::Rope(k, spec.n_kv_heads, spec.head_dim_k, rope.rot_dim, delta, rope.freq_base,
                rope.mode, rope.factors(), rope.scaling);
}

}  // namespace

void MemArtMemory::PlaceLayer(int layer, const std::vector<RowSpan>& rows) {
  const model::ModelSpec& spec = model_.spec();
  std::vector<float> k(spec.k_dim()), v(spec.v_dim());
  size_t i = 0;
  for (const RowSpan& span : rows) {
    for (int64_t r = span.begin; r < span.end; ++r, ++i) {
      const kv::RowRef src = history_rows_[r];
      pool_->ReadToken(src, layer, k.data(), v.data());
      // History keys sit at their history position r; working row i is read at position i
      // (decoupled) or r (coupled).
      if (!config_.coupled_positions)
        Rotate(k.data(), spec, rope_[layer], static_cast<int64_t>(i) - r);
      pool_->WriteToken(working_rows_[i], layer, k.data(), v.data());
    }
  }
  assert(i == working_rows_.size());
}

void MemArtMemory::CoupleLayerView(int layer, const std::vector<RowSpan>& rows) {
  std::vector<kv::ViewRun>& list = working_->view().mutable_layer(layer);
  // The first R slots are the working rows (appended before the query); re-place them.
  std::vector<kv::ViewRun> rest;
  int64_t skip = static_cast<int64_t>(working_rows_.size());
  for (const kv::ViewRun& run : list) {
    if (skip >= run.n_rows) {
      skip -= run.n_rows;
      continue;
    }
    kv::ViewRun tail = run;
    tail.first_row += static_cast<int32_t>(skip);
    tail.n_rows -= static_cast<int32_t>(skip);
    tail.first_pos += skip;
    skip = 0;
    rest.push_back(tail);
  }
  list.clear();
  size_t i = 0;
  for (const RowSpan& span : rows) {
    for (int64_t r = span.begin; r < span.end; ++r, ++i) {
      const kv::RowRef w = working_rows_[i];
      kv::ViewRun* last = list.empty() ? nullptr : &list.back();
      if (last != nullptr && last->block == w.block && last->first_row + last->n_rows == w.row &&
          last->first_pos + last->n_rows == r) {
        ++last->n_rows;
      } else {
        list.push_back({w.block, w.row, 1, r});
      }
    }
  }
  list.insert(list.end(), rest.begin(), rest.end());
}

Status MemArtMemory::CheckHeads(const model::ModelSpec& spec, const MemArtConfig& config) {
  for (const HeadRef& h : config.retrieval_heads) {
    if (h.layer < 0 || h.layer >= spec.n_layers || h.head < 0 || h.head >= spec.n_heads) {
      return InvalidArgument("memart: retrieval head " + std::to_string(h.layer) + "." +
                             std::to_string(h.head) + " is not a query head of the model (" +
                             std::to_string(spec.n_layers) + " layers of " +
                             std::to_string(spec.n_heads) + ")");
    }
  }
  return Status::Ok();
}

Status MemArtMemory::ResetWorking(int64_t r_rows) {
  working_->Clear();
  working_rows_.clear();
  if (r_rows > 0) {
    auto rows = working_->AppendRows(static_cast<int>(r_rows), 0);
    if (!rows.ok()) return rows.status().WithContext("memart: retrieved rows");
    working_rows_ = std::move(*rows);
    for (size_t i = 0; i < working_rows_.size(); ++i) {
      pool_->set_rotated_pos(working_rows_[i], static_cast<int64_t>(i));
    }
  }
  return Status::Ok();
}

Status MemArtMemory::RunQuery(std::span<const int32_t> tokens, ThreadPool* pool,
                              const ChooseRows& choose, int last_layer, bool observe,
                              std::vector<float>* logits) {
  const model::ModelSpec& spec = model_.spec();
  engine::Batch batch;
  batch.tokens.assign(tokens.begin(), tokens.end());
  for (size_t i = 0; i < tokens.size(); ++i) batch.positions.push_back(first_query_pos_ + i);
  engine::ForwardPass fp(model_, pool);
  std::vector<float> raw_q;
  fp.set_tap([&](const engine::TapContext& tap) {
    const int l = tap.layer();
    const int n = tap.n_tokens();
    raw_q.assign(tap.q().begin(), tap.q().end());
    const kv::RopeSpec& rope = rope_[l];
    for (int t = 0; t < n; ++t) {  // un-rotate: the boxes hold position-free keys
      if (rope.rot_dim == 0) break;
      kernels::Rope(raw_q.data() + static_cast<size_t>(t) * spec.q_dim(), spec.n_heads,
                    spec.head_dim_k, rope.rot_dim, -tap.positions()[t], rope.freq_base, rope.mode,
                    rope.factors(), rope.scaling);
    }
    if (observe && observer_) observer_(l, raw_q, n);
    const std::vector<RowSpan> chosen = choose(l, raw_q.data(), n);
    PlaceLayer(l, chosen);
    if (config_.coupled_positions) CoupleLayerView(l, chosen);
  });
  if (Status st = fp.Begin(batch, working_.get()); !st.ok()) return st;
  for (int l = 0; l <= last_layer && !fp.done(); ++l) fp.StepLayer();
  if (fp.done()) {
    std::vector<float> discarded;
    fp.Finish(logits != nullptr ? logits : &discarded);
  }
  return Status::Ok();
}

MemArtMemory::Selection MemArtMemory::PrepareSelection(tokenizer::TokenSpan scoring,
                                                       ThreadPool* pool) const {
  Selection sel;
  sel.scoring = scoring;
  sel.pool = pool;
  PartitionBlocks(&sel.kept, &sel.candidates);
  sel.k_eff = std::min<int64_t>(config_.top_k, sel.candidates.size());
  // Turn-bounded neighbours: each candidate's turn blocks, as candidate indices.
  if (config_.turn_bounded && !sel.candidates.empty()) {
    for (int64_t b : sel.candidates) {
      const BlockSpan t = TurnBlocks(b);
      sel.neighbour_spans.push_back(
          {t.first - sel.candidates.front(), t.second - sel.candidates.front()});
    }
  }
  return sel;
}

void MemArtMemory::ScoreBlocks(int layer, const float* q, int n_tokens, Selection* sel) const {
  const model::ModelSpec& spec = model_.spec();
  if (config_.strategy.block_score == BlockScore::kExact) {
    RawKeys(layer, &sel->raw_keys);
    BlockExactScores(sel->raw_keys, spec.n_kv_heads, spec.head_dim_k, config_.block_size, q,
                     n_tokens, spec.n_heads, spec.attn_scale(), sel->pool, &sel->scores);
  } else {
    BlockUpperBounds(index_, layer, q, n_tokens, spec.n_heads, spec.attn_scale(), sel->pool,
                     &sel->scores, config_.strategy.block_score);
  }
}

std::vector<RowSpan> MemArtMemory::TopRows(const Selection& sel,
                                           const std::vector<double>& score) const {
  std::vector<int64_t> chosen = sel.kept;
  if (sel.k_eff == 0) return SpansOf(chosen);
  std::vector<double> cand_score(sel.candidates.size());
  for (size_t i = 0; i < sel.candidates.size(); ++i) cand_score[i] = score[sel.candidates[i]];
  // Candidates are the contiguous blocks between the kept ones: adjacent indices are adjacent
  // blocks.
  for (int64_t i :
       TopKWithNeighbors(cand_score, sel.k_eff, config_.neighbors, sel.neighbour_spans)) {
    chosen.push_back(sel.candidates[i]);
  }
  std::sort(chosen.begin(), chosen.end());
  return SpansOf(chosen);
}

std::vector<RowSpan> MemArtMemory::ChooseForLayer(int layer, const float* q, int n_tokens,
                                                  Selection* sel) const {
  const model::ModelSpec& spec = model_.spec();
  std::vector<double> score(n_blocks(), 0.0);
  if (sel->k_eff > 0 && n_tokens > 0) {
    // The rows of the scoring tokens among the layer's query rows.
    q += sel->scoring.begin * spec.q_dim();
    n_tokens = static_cast<int>(sel->scoring.end - sel->scoring.begin);
    ScoreBlocks(layer, q, n_tokens, sel);
    score = AggregateScores(sel->scores, static_cast<int64_t>(n_tokens) * spec.n_heads,
                            n_blocks(), config_.strategy);
    sel->score = score;
  } else {
    sel->score.clear();
  }
  return TopRows(*sel, score);
}

void MemArtMemory::AddHeadScores(int layer, int n_tokens, const Selection& sel,
                                 std::vector<double>* score) const {
  const model::ModelSpec& spec = model_.spec();
  n_tokens = static_cast<int>(sel.scoring.end - sel.scoring.begin);  // the rows scored
  std::vector<float> rows;
  int64_t n_rows = 0;
  for (const HeadRef& h : config_.retrieval_heads) {
    if (h.layer != layer) continue;
    for (int t = 0; t < n_tokens; ++t) {
      const float* src =
          sel.scores.data() + (static_cast<size_t>(t) * spec.n_heads + h.head) * n_blocks();
      rows.insert(rows.end(), src, src + n_blocks());
      ++n_rows;
    }
  }
  if (n_rows == 0) return;
  const bool sum = config_.strategy.agg == ScoreAgg::kSum;
  const std::vector<double> s = AggregateScores(rows, n_rows, n_blocks(), config_.strategy);
  for (int64_t b = 0; b < n_blocks(); ++b) {
    (*score)[b] = sum ? (*score)[b] + s[b] : std::max((*score)[b], s[b]);
  }
}

void MemArtMemory::NoteRows(int layer, const std::vector<RowSpan>& rows,
                            RetrievalReport* rep) const {
  rep->rows[layer] = rows;
  std::vector<int64_t>& blocks = rep->blocks[layer];
  for (const RowSpan& s : rows) {
    for (int64_t b = s.begin / config_.block_size; b <= (s.end - 1) / config_.block_size; ++b) {
      if (blocks.empty() || blocks.back() < b) blocks.push_back(b);
    }
  }
}

void MemArtMemory::NoteRanks(int layer, const Selection& sel, const std::vector<double>& score,
                             RetrievalReport* rep) const {
  std::vector<int32_t>& ranks = rep->ranks[layer];
  ranks.clear();
  if (score.empty() || sel.candidates.empty()) return;
  std::vector<int64_t> order = sel.candidates;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  ranks.assign(n_blocks(), 0);
  for (size_t i = 0; i < order.size(); ++i) ranks[order[i]] = static_cast<int32_t>(i + 1);
}

Status MemArtMemory::RetrieveByLayer(std::span<const int32_t> tokens, Selection* sel,
                                     RetrievalReport* rep, std::vector<float>* logits) {
  const int n_layers = model_.spec().n_layers;
  if (tokens.empty()) {  // nothing scores: the always-kept blocks and the first top_k
    for (int l = 0; l < n_layers; ++l) {
      const std::vector<RowSpan> rows = ChooseForLayer(l, nullptr, 0, sel);
      NoteRows(l, rows, rep);
      PlaceLayer(l, rows);
      if (config_.coupled_positions) CoupleLayerView(l, rows);
    }
    return Status::Ok();
  }
  auto choose = [&](int layer, const float* q, int n) {
    std::vector<RowSpan> rows = ChooseForLayer(layer, q, n, sel);
    NoteRows(layer, rows, rep);
    NoteRanks(layer, *sel, sel->score, rep);
    return rows;
  };
  return RunQuery(tokens, sel->pool, choose, n_layers - 1, true, logits)
      .WithContext("memart: query prefill");
}

Status MemArtMemory::RetrieveByHeads(std::span<const int32_t> tokens, Selection* sel,
                                     RetrievalReport* rep, std::vector<float>* logits) {
  // Pass 1, through the last retrieval head's layer: the retrieval heads' rows, normalized
  // per row and aggregated (Table 1) over all of them, in whichever layers they are.
  int last = 0;
  for (const HeadRef& h : config_.retrieval_heads) last = std::max(last, h.layer);
  std::vector<double> score(n_blocks(),
                            config_.strategy.agg == ScoreAgg::kSum ? 0.0 : -INFINITY);
  auto scouting = [&](int layer, const float* q, int n_tokens) {
    std::vector<RowSpan> chosen = ChooseForLayer(layer, q, n_tokens, sel);
    AddHeadScores(layer, n_tokens, *sel, &score);
    return chosen;
  };
  KVMEM_RETURN_IF_ERROR(RunQuery(tokens, sel->pool, scouting, last, false, nullptr)
                            .WithContext("memart: retrieval heads' pass"));
  // Pass 2: every layer reads the retrieval heads' choice.
  const std::vector<RowSpan> chosen =
      config_.whole_turns
          ? WholeTurns(sel->kept, sel->candidates, score, sel->k_eff * config_.block_size)
          : TopRows(*sel, score);
  int64_t r_rows = 0;
  for (const RowSpan& s : chosen) r_rows += s.end - s.begin;
  rep->retrieved_rows = r_rows;
  if (!config_.coupled_positions) first_query_pos_ = r_rows;
  KVMEM_RETURN_IF_ERROR(ResetWorking(r_rows).WithContext("memart: turn"));
  auto shared = [&](int layer, const float*, int) {
    NoteRows(layer, chosen, rep);
    NoteRanks(layer, *sel, score, rep);
    return chosen;
  };
  return RunQuery(tokens, sel->pool, shared, model_.spec().n_layers - 1, true, logits)
      .WithContext("memart: query prefill");
}

Status MemArtMemory::BeginTurn(std::span<const int32_t> tokens, ThreadPool* pool,
                               RetrievalReport* report, tokenizer::TokenSpan scoring,
                               std::vector<float>* logits) {
  if (in_turn_) return FailedPrecondition("memart: a turn is already open");
  const auto n_query = static_cast<int64_t>(tokens.size());
  if (scoring.end < 0) scoring.end = n_query;
  if (!tokens.empty() &&
      (scoring.begin < 0 || scoring.begin >= scoring.end || scoring.end > n_query)) {
    return InvalidArgument("memart: scoring tokens [" + std::to_string(scoring.begin) + ", " +
                           std::to_string(scoring.end) + ") are not a range of the " +
                           std::to_string(n_query) + " query tokens");
  }
  Selection sel = PrepareSelection(scoring, pool);
  int64_t r_rows = sel.k_eff * config_.block_size;
  for (int64_t b : sel.kept) r_rows += BlockRows(b);
  const int n_layers = model_.spec().n_layers;
  RetrievalReport rep;
  rep.history_rows = history_rows();
  rep.retrieved_rows = r_rows;
  rep.query_tokens = n_query;
  rep.blocks.assign(n_layers, {});
  rep.rows.assign(n_layers, {});
  rep.ranks.assign(n_layers, {});
  first_query_pos_ = config_.coupled_positions ? history_rows() : r_rows;
  Status st = ResetWorking(r_rows).WithContext("memart: turn");
  if (st.ok()) {
    const bool by_heads = !config_.retrieval_heads.empty() && sel.k_eff > 0 && !tokens.empty();
    st = by_heads ? RetrieveByHeads(tokens, &sel, &rep, logits)
                  : RetrieveByLayer(tokens, &sel, &rep, logits);
  }
  if (!st.ok()) {
    working_->Clear();
    working_rows_.clear();
    return st;
  }
  in_turn_ = true;
  if (report != nullptr) *report = std::move(rep);
  return Status::Ok();
}

void MemArtMemory::RawKeys(int layer, std::vector<float>* keys) const {
  const model::ModelSpec& spec = model_.spec();
  const size_t k_dim = static_cast<size_t>(spec.k_dim());
  keys->resize(history_rows_.size() * k_dim);
  std::vector<float> v(spec.v_dim());
  for (size_t r = 0; r < history_rows_.size(); ++r) {
    float* k = keys->data() + r * k_dim;
    pool_->ReadToken(history_rows_[r], layer, k, v.data());
    Rotate(k, spec, rope_[layer], -static_cast<int64_t>(r));
  }
}

void MemArtMemory::IndexRow(kv::RowRef row, int64_t pos) {
  const model::ModelSpec& spec = model_.spec();
  const int64_t block = pos / config_.block_size;
  while (index_.n_blocks() <= block) index_.AddBlock();
  std::vector<float> raw(spec.k_dim()), v(spec.v_dim());
  for (int l = 0; l < spec.n_layers; ++l) {
    // The box encloses the key as stored (rounded by the format), un-rotated.
    pool_->ReadToken(row, l, raw.data(), v.data());
    Rotate(raw.data(), spec, rope_[l], -pos);
    for (int h = 0; h < spec.n_kv_heads; ++h) {
      index_.Enclose(block, l, h, raw.data() + h * spec.head_dim_k, 1, spec.head_dim_k);
    }
  }
}

int64_t MemArtMemory::turn_rows() const {
  return in_turn_ ? working_->n_rows() - static_cast<int64_t>(working_rows_.size()) : 0;
}

Status MemArtMemory::EndTurn(bool keep, std::span<const int64_t> turn_offsets) {
  if (!in_turn_) return FailedPrecondition("memart: no open turn");
  const model::ModelSpec& spec = model_.spec();
  const int64_t r_rows = static_cast<int64_t>(working_rows_.size());
  const int64_t n_new = turn_rows();
  in_turn_ = false;
  Status result = Status::Ok();
  if (const int64_t bad = FirstNotAscending(turn_offsets, n_new); keep && n_new > 0 && bad >= 0) {
    result = InvalidArgument("memart: turn offset " + std::to_string(turn_offsets[bad]) +
                             " is not ascending within the turn's " + std::to_string(n_new) +
                             " rows");
    keep = false;
  }
  if (keep && n_new > 0) {
    // The turn's rows in storage order: the working sequence's rows after the first R.
    std::vector<kv::RowRef> turn;
    turn.reserve(n_new);
    const int block_rows = pool_->geometry().block_rows;
    for (int64_t i = r_rows; i < working_->n_rows(); ++i) {
      turn.push_back({working_->blocks()[i / block_rows], static_cast<int32_t>(i % block_rows)});
    }
    const int64_t n0 = history_rows();
    auto rows = history_->AppendRows(static_cast<int>(n_new), n0);
    if (!rows.ok()) {
      result = rows.status().WithContext("memart: history rows");
    } else {
      std::vector<float> k(spec.k_dim()), v(spec.v_dim());
      for (int64_t j = 0; j < n_new; ++j) {
        const int64_t pos = n0 + j;
        const int64_t from = pool_->rotated_pos(turn[j]);
        for (int l = 0; l < spec.n_layers; ++l) {
          pool_->ReadToken(turn[j], l, k.data(), v.data());
          Rotate(k.data(), spec, rope_[l], pos - from);
          pool_->WriteToken((*rows)[j], l, k.data(), v.data());
        }
        pool_->set_rotated_pos((*rows)[j], pos);
        IndexRow((*rows)[j], pos);
      }
      history_rows_.insert(history_rows_.end(), rows->begin(), rows->end());
      if (n0 == 0) turn_starts_.push_back(0);
      for (int64_t o : turn_offsets) {
        if (n0 + o > 0) turn_starts_.push_back(n0 + o);
      }
    }
  }
  working_->Clear();
  working_rows_.clear();
  return result;
}

}  // namespace kvmem::memory
