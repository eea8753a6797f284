// The agent-trace benchmark (docs/eval/agent-trace.md): a multi-turn tool-use trajectory replayed
// teacher-forced through one memory policy of the table, as a client that resends its whole
// conversation would drive an agent. Every user or tool turn is one request (the prompt up to it
// with the generation prompt; the given assistant turns arrive in the next request), committed
// without a reply; every probe is asked where the trace places it (a user question after a
// turn) and aborted, so the trajectory goes on unchanged.
//
// Per request: prompt rows, rows reused from the cache (the prefix hit) and live rows the reply
// would read. Per probe: the gold answer's NLL, the first answer token's distribution (for the KL
// to the full cache), the greedy answer, and the share of the answer's bytes in its evidence
// turns that are live (evidence kept).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "eval/policy_qa.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::eval {

struct TraceTurn {
  std::string role;  // "user", "assistant" or "tool"
  std::string name;  // the tool's, for a tool turn
  std::string content;
};

struct TraceProbe {
  int after_turn = 0;
  std::string question;
  std::string answer;
  std::vector<int> evidence_turns;
};

struct AgentTrace {
  std::string id;
  std::string system;
  nlohmann::json tools = nlohmann::json::array();
  std::vector<TraceTurn> turns;
  std::vector<TraceProbe> probes;
};

// A trace file, checked field by field (InvalidArgument naming the field).
Result<AgentTrace> LoadAgentTrace(const std::string& path);

// The rendered prompt of the request after turns[0..last] (and, when non-empty, a user question
// after them), with the generation prompt. Tools are listed in the system message; tool turns
// keep their role (ChatML passes it through).
Result<std::string> RenderTracePrompt(const tokenizer::ChatTemplate& tmpl, const AgentTrace& trace,
                                      int last, const std::string& question);

struct TraceRequest {
  int turn = 0;
  int64_t prompt_rows = 0, cached_rows = 0, live_rows = 0;
};

struct TraceProbeResult {
  int probe = 0;
  double nll = 0;
  std::string prediction;
  std::vector<float> first_logits;
  double evidence_kept = 1;  // share of the answer's evidence bytes the reply reads
  int64_t live_rows = 0, prompt_rows = 0;
};

struct TraceRun {
  std::vector<TraceRequest> requests;
  std::vector<TraceProbeResult> probes;
  size_t kv_peak_bytes = 0;
  double seconds = 0;
};

// The trace through a new EvalAgent of (policy, config). progress(done, total) after each
// request.
Result<TraceRun> RunAgentTrace(const model::Model& model, const tokenizer::Tokenizer& tok,
                               ThreadPool* threads, const tokenizer::ChatTemplate& tmpl,
                               const AgentTrace& trace, const std::string& policy,
                               const nlohmann::json& config, const EvalAgentOptions& options,
                               int answer_tokens,
                               const std::function<void(int, int)>& progress = {});

}  // namespace kvmem::eval
