// LoCoMo conversations (Maharana et al., ACL 2024): parsing the released JSON and rendering a
// conversation as plain dialogue text, the input of the KV-format evaluation (`kvmem eval
// kvquant`) and of LoCoMo QA.
//
// Accepted shapes: one conversation object as in the per-conversation files of
// ../shared/data/locomo ({speaker_a, speaker_b, session_N_date_time, session_N, qa, ...}), the
// same wrapped as {"sample_id", "conversation": {...}, "qa"} (the original locomo10.json
// entries), or an array of either. The files are untrusted input: anything malformed is an
// InvalidArgument/Corrupt status naming the offending key, never a crash. Fields not needed here
// (img_url, query, events, observations, summaries) are ignored.
//
// Rendered text (RenderConversation), sessions in session-number order, sessions without turns
// left out:
//
//   Session 1, 1:56 pm on 8 May, 2023
//   Caroline: Hey Mel! Good to see you!
//   Caroline: The stories were so inspiring! [shares a photo of a dog walking past a wall]
//
//   Session 2, 1:14 pm on 25 May, 2023
//   ...
//
// A turn is one line: whitespace runs that contain a line break become one space, and the text
// is trimmed. A shared photo's caption (blip_caption) follows the text as "[shares <caption>]".
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvmem::eval {

struct LocomoTurn {
  std::string speaker;
  std::string dia_id;        // "D<session>:<turn>"
  std::string text;
  std::string blip_caption;  // empty when the turn shares no photo
};

struct LocomoSession {
  int number = 0;         // N of session_N
  std::string date_time;  // "1:56 pm on 8 May, 2023"
  std::vector<LocomoTurn> turns;
};

struct LocomoQa {
  std::string question;
  std::string answer;              // numbers rendered as text; empty for category 5
  std::string adversarial_answer;  // category 5 only
  std::vector<std::string> evidence;  // dia_ids
  int category = 0;  // 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial
};

struct LocomoConversation {
  std::string id;  // sample_id, else the file name without extension
  std::string speaker_a, speaker_b;
  std::vector<LocomoSession> sessions;  // ascending number, each with at least one turn
  std::vector<LocomoQa> qa;
};

// The LoCoMo files to read: each path in `given` is a .json file or a directory (its *.json,
// sorted). With none given: $KVMEM_DATA/locomo (KVMEM_DATA is the data root), else
// ../shared/data/locomo relative to the current directory; NotFound when neither exists.
Result<std::vector<std::string>> ResolveLocomoFiles(const std::vector<std::string>& given);

// `id` names conversations that carry no sample_id (an array gets id#0, id#1, ...).
Result<std::vector<LocomoConversation>> ParseLocomo(std::string_view json, std::string_view id);
// Reads and parses a file; the id defaults to the file name without directory and extension.
Result<std::vector<LocomoConversation>> LoadLocomoFile(const std::string& path);
// Every conversation of the files ResolveLocomoFiles(given) names, in file order.
Result<std::vector<LocomoConversation>> LoadLocomoData(const std::vector<std::string>& given);

// One long history from several conversations (`kvmem eval locomo --concat`, e.g. ~100K tokens
// for a model with an 8K window): their sessions in the given order, renumbered 1..N, every
// dia_id and evidence reference renamed to its new session ("D<n>:<turn>"), and the first
// `limit` questions of each conversation (0: all) in conversation order. The id joins the ids
// with '+'.
LocomoConversation ConcatConversations(const std::vector<LocomoConversation>& convs, int limit);

// Where one turn's line lies in the rendered text: bytes [begin, end), "Speaker: ..." without
// the line break.
struct TurnSpan {
  std::string dia_id;
  size_t begin = 0;
  size_t end = 0;
};

struct RenderedConversation {
  std::string text;
  std::vector<TurnSpan> turns;  // in text order
};

RenderedConversation RenderConversation(const LocomoConversation& c);

// The turn text as rendered (one line, trimmed, photo caption appended).
std::string RenderTurnText(const LocomoTurn& t);

}  // namespace kvmem::eval
