// Turns of retrieval agents (memory_mode.h): the agent's rows are a MemArt history; a turn
// prefills what its prompt adds to the conversation with per-layer retrieval, decodes on the
// working rows, then appends prompt and reply to the history and saves it.
#include <algorithm>
#include <chrono>

#include "engine/forward.h"
#include "memory/agents/agent_runtime.h"
#include "memory/agents/agent_slot.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/token_span.h"

namespace kvmem::memory {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The text after the agent's conversation when the prompt continues it (a client that resends
// the whole conversation), else the whole prompt (a client that sends only what is new).
std::string_view QueryText(const std::string& history, std::string_view prompt,
                           store::PrefixMatchKind* kind) {
  const store::TextMatch m = store::MatchText(history, prompt);
  *kind = m.kind;
  if (history.empty() || !prompt.starts_with(history)) return prompt;
  return prompt.substr(history.size());
}

}  // namespace

std::vector<int64_t> AgentRuntime::MessageStarts(std::span<const int32_t> tokens, int64_t first,
                                                 int64_t limit) const {
  std::vector<int64_t> starts;
  for (size_t i = 0; i < tokens.size() && first + static_cast<int64_t>(i) < limit; ++i) {
    if (tokenizer::OpensChatMessage(Piece(tokens[i]))) starts.push_back(first + i);
  }
  return starts;
}

Result<TokenRange> AgentRuntime::ScoringTokens(std::string_view query_text,
                                               std::span<const int32_t> ids,
                                               std::string_view retrieval_query) const {
  // ids may open with a BOS the text does not spell.
  const std::vector<int32_t> plain =
      tok_.Encode(query_text, /*add_special=*/false, /*parse_special=*/true);
  const auto lead = static_cast<int64_t>(ids.size()) - static_cast<int64_t>(plain.size());
  if (lead < 0 || !std::equal(plain.begin(), plain.end(), ids.begin() + lead)) {
    return Internal("the prompt's tokens do not end with its text's");
  }
  Result<tokenizer::TokenSpan> span =
      tokenizer::FindTokenSpan(tok_, query_text, plain, retrieval_query);
  if (!span.ok()) {
    return InvalidArgument("'retrieval_query' is not in what the prompt adds to the agent's "
                           "conversation (" + span.status().message() + ")");
  }
  // The last token is decoded from, not prefilled: the scoring tokens end before it.
  const int64_t last = static_cast<int64_t>(ids.size()) - 1;
  const TokenRange r{lead + span->begin, std::min(lead + span->end, last)};
  if (r.begin >= r.end) {
    return InvalidArgument("'retrieval_query' covers no prefilled token of the prompt");
  }
  return r;
}

Status AgentRuntime::AdoptHistory(Slot& slot) {
  // The history's turns: every message the chat template opened (the turns are not stored;
  // the messages are in the tokens).
  const std::vector<int64_t> starts = MessageStarts(slot.tokens, 0, slot.seq->n_rows());
  KVMEM_ASSIGN_OR_RETURN(slot.memart,
                         MemArtMemory::Restore(model_, slot.pool.get(), slot.memory.retrieval,
                                               std::move(slot.seq), starts));
  // Where each token's text ends: its piece lengths summed (within the stored text).
  slot.token_ends.clear();
  size_t end = 0;
  for (int32_t id : slot.tokens) {
    end = std::min(slot.text.size(), end + Piece(id).size());
    slot.token_ends.push_back(end);
  }
  return Status::Ok();
}

Result<TurnResult> AgentRuntime::RunRetrievalTurn(Slot& slot, std::string_view prompt_text,
                                                  const TurnParams& params,
                                                  const TurnCallbacks& callbacks, TurnResult r) {
  MemArtMemory& mem = *slot.memart;
  const std::string_view query_text = QueryText(slot.text, prompt_text, &r.prompt.match);
  if (query_text.empty()) {
    return InvalidArgument("the prompt adds nothing to the agent's conversation");
  }
  const std::vector<int32_t> ids =
      tok_.Encode(query_text, /*add_special=*/slot.tokens.empty(), /*parse_special=*/true);
  if (ids.empty()) return InvalidArgument("the prompt is empty");
  if (static_cast<int64_t>(ids.size()) >= n_ctx_) {
    return OutOfRange("the new part of the prompt has " + std::to_string(ids.size()) +
                      " tokens; the context holds " + std::to_string(n_ctx_));
  }
  if (mem.history_rows() + n_ctx_ > options_.max_history_tokens) {
    return ResourceExhausted("the agent's memory holds " + std::to_string(mem.history_rows()) +
                             " tokens; this server keeps at most " +
                             std::to_string(options_.max_history_tokens) +
                             " (with one context of room for the turn)");
  }

  TokenRange scoring;
  if (!params.retrieval_query.empty()) {
    KVMEM_ASSIGN_OR_RETURN(scoring, ScoringTokens(query_text, ids, params.retrieval_query));
  }

  auto t0 = std::chrono::steady_clock::now();
  RetrievalReport rep;
  std::vector<float> logits;
  {
    std::lock_guard<std::mutex> l(compute_mu_);
    KVMEM_RETURN_IF_ERROR(
        mem.BeginTurn(std::span(ids).first(ids.size() - 1), threads_, &rep, scoring));
    Status st = mem.working()->n_rows() + 1 >= n_ctx_
                    ? OutOfRange("the retrieved history (" + std::to_string(rep.retrieved_rows) +
                                 " rows) and the prompt's " + std::to_string(ids.size()) +
                                 " new tokens do not fit the context of " +
                                 std::to_string(n_ctx_))
                    : engine::Forward(model_, threads_, mem.working(), std::span(ids).last(1),
                                      mem.next_position(), false, &logits);
    if (!st.ok()) {
      (void)mem.EndTurn(/*keep=*/false);
      return st;
    }
  }
  RetrievalTurn info;
  info.history_tokens = rep.history_rows;
  info.retrieved_rows = rep.retrieved_rows;
  info.prefill_tokens = static_cast<int64_t>(ids.size());
  info.kv_len_decode = mem.working()->n_rows();
  info.scoring_begin = scoring.begin;
  info.scoring_end = scoring.end < 0 ? static_cast<int64_t>(ids.size()) - 1 : scoring.end;
  const int64_t bs = mem.config().block_size;
  const std::vector<memory::RowSpan> read = rep.RowsRead();
  for (const auto& [block, layers] : rep.BlockVotes()) {
    // The block's rows that were read (all of them unless whole turns were read).
    for (const memory::RowSpan& s : read) {
      const int64_t first = std::max(s.begin, block * bs);
      const int64_t end = std::min(s.end, (block + 1) * bs);
      if (first >= end) continue;
      RecalledBlock b;
      b.block = block;
      b.first_token = first;
      b.n_tokens = end - first;
      b.layers = layers;
      const size_t from = first == 0 ? 0 : slot.token_ends[first - 1];
      b.text = slot.text.substr(from, slot.token_ends[end - 1] - from);
      info.blocks.push_back(std::move(b));
    }
  }
  r.prompt.prompt_tokens = rep.retrieved_rows + info.prefill_tokens;
  r.prompt.cached_tokens = rep.retrieved_rows;
  r.prompt.prefill_seconds = Since(t0);
  if (callbacks.on_prompt) callbacks.on_prompt(r.prompt);

  // The turn's tokens and text as they join the history: the query, then each kept reply token.
  std::vector<int32_t> turn_tokens = ids;
  std::string turn_text(query_text);
  std::vector<size_t> turn_ends;
  size_t end = slot.text.size();
  for (int32_t id : ids) {
    end = std::min(slot.text.size() + turn_text.size(), end + Piece(id).size());
    turn_ends.push_back(end);
  }
  std::vector<int32_t> history = slot.tokens;
  history.insert(history.end(), ids.begin(), ids.end());
  Status decoded = DecodeReply(
      mem.working(), [&mem] { return mem.next_position(); }, &logits, std::move(history), params,
      callbacks, &r, [&](int32_t t) {
        turn_tokens.push_back(t);
        turn_text.append(Piece(t));
        turn_ends.push_back(slot.text.size() + turn_text.size());
      });
  if (!decoded.ok()) {
    (void)mem.EndTurn(/*keep=*/false);
    return decoded;
  }
  // The history's turns are the chat messages (as AdoptHistory finds them in stored tokens).
  KVMEM_RETURN_IF_ERROR(
      mem.EndTurn(/*keep=*/true, MessageStarts(turn_tokens, 0, mem.turn_rows())));
  slot.tokens.insert(slot.tokens.end(), turn_tokens.begin(), turn_tokens.end());
  slot.text += turn_text;
  slot.token_ends.insert(slot.token_ends.end(), turn_ends.begin(), turn_ends.end());
  r.kv_tokens = mem.history_rows();
  r.retrieval = info;
  std::lock_guard<std::mutex> l(slot.mu);
  slot.last_turn = std::move(info);
  return r;
}

}  // namespace kvmem::memory
