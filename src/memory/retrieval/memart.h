// MemArt (../shared/papers/memart.txt, Algorithm 1): an agent's history kept as KV blocks, and
// for each new request the model's own attention picks, layer by layer, the blocks it reads.
//
//   MemArtMemory mem(model, &pool, config);
//   mem.BeginTurn(prompt_minus_last, &threads, &report);  // retrieval + prefill of the query
//   engine::Generate(model, &threads, mem.working(), {last prompt token}, ...);  // decode
//   mem.EndTurn(/*keep=*/true);    // the turn (prompt + reply) joins the history as blocks
//
// History: every row of every kept turn, in order, in a sequence of the pool (`history()`), the
// keys rotated at their history positions 0..N-1, cut into memory blocks of BS rows indexed by
// their boxes (block_index.h). A turn runs in a separate working sequence:
//   1. The retrieved set has the same size in every layer: the always-kept blocks (the first
//      keep_first and last keep_last tokens, rounded out to whole blocks; the newest block
//      whenever it is partial) plus the top_k of the others by the layer's score.
//   2. The working sequence first holds R rows for that set, then the query tokens. In each
//      layer, after the query's Q/K/V are computed and before its attention (a LayerTap), the
//      query's Q heads score every block (block_scoring.h; q un-rotated to be position-free as
//      the boxes are), the top-k are chosen, and the set's rows are copied into that layer's R
//      working rows in chronological order, re-encoded at positions 0..R-1 (Eq. 6: keys rotated
//      by the difference from their history position; the query sits at R, R+1, ...). Only the
//      query is prefilled; each layer may read different blocks.
//   3. coupled_positions (the paper's appendix A.3 ablation): the same rows are read at their
//      original history positions, the query after the whole history (positions N..), so a
//      history longer than the model's window puts the query beyond it.
//   4. EndTurn(keep) appends the working rows after the retrieved ones (prompt and reply) to the
//      history, re-rotated to positions N.., and widens/adds their blocks' boxes. The history
//      remembers where its turns begin (turn_starts(): by default each EndTurn appends one turn;
//      a caller may mark others inside it, e.g. a prompt's and its reply's messages), for
//      turn-bounded neighbours.
// Retrieval heads (MemArtConfig::retrieval_heads, a deviation; off by default): the query runs
// twice. The first pass goes up to the last layer holding a retrieval head, each layer reading
// its own choice as in 2; there the retrieval heads' rows alone are scored, normalized and
// aggregated as in 2, into one score per block. The second pass prefills the query with every
// layer reading the top_k of that score (and the always-kept blocks), or with whole_turns the
// whole turns of the best blocks. Which heads point at the
// evidence is measured on other data (`kvmem eval locomo --head-report`), as query-focused
// retrieval heads are (Zhang et al. 2025, QRHead).
// Scoring tokens (BeginTurn's `scoring`, a deviation; all by default): only these query tokens'
// Q rows score the blocks, in both passes; every query token is still prefilled. LoCoMo's
// evaluation scores with a question's own tokens, not the instruction around it
// (docs/eval/memart.md); agents with the focus span (retrieval_query).
// Storage formats: any per-row KV format (f16, q8_0, q4_0); kivi4 K is refused, since the
// working rows of a layer are written after the query's.
// Not thread-safe; one turn at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_sequence.h"
#include "memory/retrieval/block_index.h"
#include "memory/retrieval/block_scoring.h"
#include "tokenizer/token_span.h"
#include "model/model.h"

namespace kvmem::memory {

// History rows [begin, end).
struct RowSpan {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const RowSpan&) const = default;
};

// One query head of one layer.
struct HeadRef {
  int layer = 0;
  int head = 0;
  bool operator==(const HeadRef&) const = default;
};
// "LAYER.HEAD", e.g. "7.1" (the form of `kvmem eval locomo --head-report`'s table).
std::string HeadRefName(HeadRef h);
// InvalidArgument unless `s` is two non-negative integers joined by a dot.
Result<HeadRef> ParseHeadRef(std::string_view s);

struct MemArtConfig {
  int block_size = 16;  // BS rows per memory block: 8, 16 or 32
  int top_k = 32;       // retrieved blocks per layer beyond the always-kept ones
  RetrievalStrategy strategy;
  int keep_first = 0;  // tokens at the start of the history always read (system prompt)
  int keep_last = 0;   // most recent history tokens always read (the last turns)
  bool coupled_positions = false;
  // Deviation, empty by default (the paper's per-layer choice): these query heads alone choose
  // one block set that every layer reads ("Retrieval heads" above).
  std::vector<HeadRef> retrieval_heads;
  // Deviation, 0 by default: each block chosen by score brings up to this many adjacent
  // candidate blocks on either side within the top_k (TopKWithNeighbors), so that the turn
  // around a found block is read, not only the block.
  int neighbors = 0;
  // Deviation, off by default: neighbours stay within the turns the chosen block overlaps (the
  // history's turns: what each EndTurn appended, or the turns it marked), so a found
  // block brings the rest of its turn and not the turns around it.
  bool turn_bounded = false;
  // Deviation, off by default; needs retrieval_heads and no neighbors: the blocks the heads rank
  // highest bring the whole turns they overlap, in score order while those fit in the top_k *
  // block_size rows (a turn longer than all of them brings its block alone), so that what is
  // read is whole turns, as text retrieval reads them, not block fragments. R then varies with
  // the turns' lengths: the always-kept rows plus at most top_k * block_size.
  bool whole_turns = false;
};
Status ValidateMemArtConfig(const MemArtConfig& config);

// What one turn's retrieval did.
struct RetrievalReport {
  int64_t history_rows = 0;    // N when the turn began
  int64_t retrieved_rows = 0;  // R, per layer
  int64_t query_tokens = 0;    // tokens prefilled
  // (n_layers) retrieved blocks per layer (always-kept ones included), ascending: those the
  // rows read touch (whole blocks unless whole_turns).
  std::vector<std::vector<int64_t>> blocks;
  // (n_layers) the history rows each layer read, ascending and disjoint.
  std::vector<std::vector<RowSpan>> rows;
  // (n_layers, n_blocks) each block's rank in that layer by the aggregated score its choice
  // was made from (1: the best candidate; ties go to the older block), 0 for always-kept blocks;
  // empty rows for layers that scored nothing. MemArt's Figure 9 plots one block's row of it.
  std::vector<std::vector<int32_t>> ranks;
  // Blocks retrieved in any layer, with the number of layers that read each, ascending.
  std::vector<std::pair<int64_t, int>> BlockVotes() const;
  // The rows read in any layer, ascending and disjoint.
  std::vector<RowSpan> RowsRead() const;
};

class MemArtMemory {
 public:
  // The pool must outlive this object and hold history and working rows. Requires
  // ValidateMemArtConfig(config).ok() and a per-row K format (not kivi4).
  static Result<std::unique_ptr<MemArtMemory>> Create(const model::Model& model, kv::KvPool* pool,
                                                      MemArtConfig config);
  // A history saved from history() and loaded back (AgentStore::Load into a sequence of
  // `pool`): its rows must sit at positions 0..N-1 in storage order. The block index is rebuilt
  // from the stored keys the way EndTurn builds it, so it equals the index before the save.
  // Corrupt when the sequence is not such a history. turn_starts: where its turns begin
  // (ascending history rows below N); empty: unknown, the history is one turn.
  static Result<std::unique_ptr<MemArtMemory>> Restore(const model::Model& model, kv::KvPool* pool,
                                                       MemArtConfig config,
                                                       std::unique_ptr<kv::KvSequence> history,
                                                       std::span<const int64_t> turn_starts = {});
  ~MemArtMemory();

  const MemArtConfig& config() const { return config_; }
  // InvalidArgument when a retrieval head is not a query head of the model.
  static Status CheckHeads(const model::ModelSpec& spec, const MemArtConfig& config);
  // Changes how later turns retrieve (top_k, strategy, always-kept parts, positions); the block
  // size stays. InvalidArgument on a bad config or a different block size, or inside a turn.
  Status Reconfigure(const MemArtConfig& config);
  const kv::KvSequence& history() const { return *history_; }
  int64_t history_rows() const { return history_->n_rows(); }
  const BlockIndex& index() const { return index_; }
  // Memory block b is history rows [b * BS, (b + 1) * BS); the newest may be partial.
  int64_t n_blocks() const { return index_.n_blocks(); }
  // History rows where turns begin, ascending (row 0 first once there is a history).
  const std::vector<int64_t>& turn_starts() const { return turn_starts_; }
  // The blocks holding the turns that block `block` overlaps: (first, last).
  BlockSpan TurnBlocks(int64_t block) const;
  // The rows of the turns that block `block` overlaps.
  RowSpan TurnRows(int64_t block) const;

  // Retrieves and prefills `tokens` (may be empty: only the retrieved rows are placed, with no
  // query to score them, i.e. the always-kept blocks and the first top_k). `scoring`: the
  // tokens whose Q rows score the blocks (a deviation: e.g. a message's content without the
  // chat template's wrapper); all of them by default. InvalidArgument when it is not a
  // non-empty range inside `tokens`. On failure nothing is left in the working sequence.
  // logits, when given and tokens are not empty: (n_vocab) of the last token.
  Status BeginTurn(std::span<const int32_t> tokens, ThreadPool* pool, RetrievalReport* report,
                   tokenizer::TokenSpan scoring = {}, std::vector<float>* logits = nullptr);
  // The working sequence of the current turn: decode continues on it at n_rows() (positions
  // R + |tokens| .., or N + |tokens| .. when coupled).
  kv::KvSequence* working() { return working_.get(); }
  // Position of the next token of the turn.
  int64_t next_position() const;
  // Called in BeginTurn for every layer with the query's position-free Q heads, (n_tokens,
  // n_heads, head_dim), before that layer's blocks are chosen: for diagnostics (which heads point
  // where). Empty: none.
  using QueryObserver = std::function<void(int layer, std::span<const float> raw_q, int n_tokens)>;
  void set_query_observer(QueryObserver observer) { observer_ = std::move(observer); }
  // The history's keys of `layer`, position-free: (N, n_kv_heads, head_dim), N = history_rows().
  void RawKeys(int layer, std::vector<float>* keys) const;
  // Rows the open turn would add to the history: the query and what was decoded after it.
  int64_t turn_rows() const;
  // Ends the turn: with keep, its rows (query and everything decoded after it) join the history,
  // with turns beginning at these offsets into them (ascending, below turn_rows(); by default
  // the turn is one turn of the history; none: it continues the last one). The working
  // sequence is emptied either way; with offsets that are not such, InvalidArgument and
  // nothing joins the history.
  static constexpr int64_t kOneTurn[] = {0};
  Status EndTurn(bool keep, std::span<const int64_t> turn_offsets = kOneTurn);

 private:
  MemArtMemory(const model::Model& model, kv::KvPool* pool, MemArtConfig config);
  // The always-kept blocks and the candidates, for the current history.
  void PartitionBlocks(std::vector<int64_t>* kept, std::vector<int64_t>* candidates) const;
  int64_t BlockRows(int64_t block) const;
  // The rows of `blocks` (ascending), as spans.
  std::vector<RowSpan> SpansOf(const std::vector<int64_t>& blocks) const;
  // whole_turns: the always-kept blocks' rows, and the turns of the candidates in `score` order
  // that fit in `budget` more rows.
  std::vector<RowSpan> WholeTurns(const std::vector<int64_t>& kept,
                                  const std::vector<int64_t>& candidates,
                                  const std::vector<double>& score, int64_t budget) const;
  // BeginTurn's stages. What a turn's block choice works from: the always-kept blocks and the
  // candidates, how many candidates each layer reads, turn-bounded neighbour spans (candidate
  // indices), the scoring tokens, and scratch for block scores.
  struct Selection {
    std::vector<int64_t> kept, candidates;
    int64_t k_eff = 0;
    std::vector<BlockSpan> neighbour_spans;
    tokenizer::TokenSpan scoring;  // end >= 0
    ThreadPool* pool = nullptr;
    std::vector<float> scores;    // (n_tokens * n_heads, n_blocks) of the last ScoreBlocks
    std::vector<double> score;    // (n_blocks) the last ChooseForLayer's aggregate; empty: none
    std::vector<float> raw_keys;  // kExact's history keys
  };
  Selection PrepareSelection(tokenizer::TokenSpan scoring, ThreadPool* pool) const;
  // Block scores of one layer's scoring query rows (Eq. 3, or a deviation of block_scoring.h)
  // into sel->scores.
  void ScoreBlocks(int layer, const float* q, int n_tokens, Selection* sel) const;
  // The always-kept blocks and the top k_eff candidates by `score`, chronological, as rows.
  std::vector<RowSpan> TopRows(const Selection& sel, const std::vector<double>& score) const;
  // The paper's choice for one layer: every scoring query row of it scores the blocks.
  std::vector<RowSpan> ChooseForLayer(int layer, const float* q, int n_tokens,
                                      Selection* sel) const;
  // Adds the retrieval heads of `layer` (scored into sel->scores by ChooseForLayer) to `score`:
  // their rows normalized and aggregated as Table 1, summed or maxed over layers.
  void AddHeadScores(int layer, int n_tokens, const Selection& sel,
                     std::vector<double>* score) const;
  // Records the rows a layer reads, and the blocks they touch.
  void NoteRows(int layer, const std::vector<RowSpan>& rows, RetrievalReport* rep) const;
  // Records the candidates' ranks in a layer by `score` (empty: nothing scored).
  void NoteRanks(int layer, const Selection& sel, const std::vector<double>& score,
                 RetrievalReport* rep) const;
  // The two ways a query reads the history: each layer its own choice (the paper), or the
  // retrieval heads' one choice for every layer (a first pass scores, a second prefills).
  Status RetrieveByLayer(std::span<const int32_t> tokens, Selection* sel, RetrievalReport* rep,
                         std::vector<float>* logits);
  Status RetrieveByHeads(std::span<const int32_t> tokens, Selection* sel, RetrievalReport* rep,
                         std::vector<float>* logits);

  // Copies history `rows` (ascending) into working rows [0, R) of `layer`.
  void PlaceLayer(int layer, const std::vector<RowSpan>& rows);
  // Encloses history row `row` (at position pos) in its block's boxes, every layer.
  void IndexRow(kv::RowRef row, int64_t pos);
  // Working rows [0, R) of `layer` in the view, at their original positions (coupled).
  void CoupleLayerView(int layer, const std::vector<RowSpan>& rows);
  // Empties the working sequence and appends the R rows retrieved rows go to.
  Status ResetWorking(int64_t r_rows);
  // Prefills `tokens` after the R working rows, calling choose(layer, position-free q, n) for
  // the history rows each layer reads, through layer `last_layer` (the query is abandoned after it
  // when that is not the model's last layer); `observe`: the query observer sees this pass;
  // logits (may be null) of the last token when the pass reaches the last layer.
  using ChooseRows = std::function<std::vector<RowSpan>(int layer, const float* q, int n)>;
  Status RunQuery(std::span<const int32_t> tokens, ThreadPool* pool, const ChooseRows& choose,
                  int last_layer, bool observe, std::vector<float>* logits);

  const model::Model& model_;
  kv::KvPool* pool_;
  MemArtConfig config_;
  std::vector<kv::RopeSpec> rope_;
  std::unique_ptr<kv::KvSequence> history_;
  std::vector<kv::RowRef> history_rows_;  // (N) in order
  std::vector<int64_t> turn_starts_;      // ascending history rows
  BlockIndex index_;
  std::unique_ptr<kv::KvSequence> working_;
  std::vector<kv::RowRef> working_rows_;  // the R retrieved rows of the current turn
  int64_t first_query_pos_ = 0;
  bool in_turn_ = false;
  QueryObserver observer_;
};

}  // namespace kvmem::memory
