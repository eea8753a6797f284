#include "eval/agent_trace.h"

#include <chrono>
#include <fstream>
#include <sstream>

namespace kvmem::eval {
namespace {

Result<std::string> Str(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) {
    return InvalidArgument(where + ": '" + key + "' must be a string");
  }
  return j[key].get<std::string>();
}

// Bytes of [b, e) that the ranges [b0, e0, b1, e1, ...] cover.
int64_t Covered(const nlohmann::json& ranges, int64_t b, int64_t e) {
  int64_t n = 0;
  for (size_t k = 0; k + 1 < ranges.size(); k += 2) {
    const int64_t lo = std::max(b, ranges[k].get<int64_t>());
    const int64_t hi = std::min(e, ranges[k + 1].get<int64_t>());
    n += std::max<int64_t>(0, hi - lo);
  }
  return n;
}

int64_t LiveRows(const memory::Json& report, int64_t prompt_rows) {
  return report.is_object() && report.contains("live_rows") ? report["live_rows"].get<int64_t>()
                                                            : prompt_rows;
}

}  // namespace

Result<AgentTrace> LoadAgentTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open trace " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not a JSON object");
  AgentTrace t;
  KVMEM_ASSIGN_OR_RETURN(t.id, Str(j, "id", path));
  KVMEM_ASSIGN_OR_RETURN(t.system, Str(j, "system", path));
  if (j.contains("tools")) {
    if (!j["tools"].is_array()) return InvalidArgument(path + ": 'tools' must be a list");
    t.tools = j["tools"];
  }
  if (!j.contains("turns") || !j["turns"].is_array() || j["turns"].empty()) {
    return InvalidArgument(path + ": 'turns' must be a non-empty list");
  }
  for (size_t i = 0; i < j["turns"].size(); ++i) {
    const nlohmann::json& tj = j["turns"][i];
    const std::string where = path + ": turns[" + std::to_string(i) + "]";
    TraceTurn turn;
    KVMEM_ASSIGN_OR_RETURN(turn.role, Str(tj, "role", where));
    KVMEM_ASSIGN_OR_RETURN(turn.content, Str(tj, "content", where));
    if (turn.role != "user" && turn.role != "assistant" && turn.role != "tool") {
      return InvalidArgument(where + ": 'role' must be user, assistant or tool");
    }
    if (tj.contains("name")) {
      KVMEM_ASSIGN_OR_RETURN(turn.name, Str(tj, "name", where));
    }
    t.turns.push_back(std::move(turn));
  }
  if (j.contains("probes")) {
    if (!j["probes"].is_array()) return InvalidArgument(path + ": 'probes' must be a list");
    for (size_t i = 0; i < j["probes"].size(); ++i) {
      const nlohmann::json& pj = j["probes"][i];
      const std::string where = path + ": probes[" + std::to_string(i) + "]";
      TraceProbe p;
      if (!pj.is_object() || !pj.contains("after_turn") || !pj["after_turn"].is_number_integer() ||
          pj["after_turn"].get<int64_t>() < 0 ||
          pj["after_turn"].get<int64_t>() >= static_cast<int64_t>(t.turns.size())) {
        return InvalidArgument(where + ": 'after_turn' must index a turn");
      }
      p.after_turn = pj["after_turn"].get<int>();
      KVMEM_ASSIGN_OR_RETURN(p.question, Str(pj, "question", where));
      KVMEM_ASSIGN_OR_RETURN(p.answer, Str(pj, "answer", where));
      if (!pj.contains("evidence_turns") || !pj["evidence_turns"].is_array()) {
        return InvalidArgument(where + ": 'evidence_turns' must be a list");
      }
      for (const nlohmann::json& e : pj["evidence_turns"]) {
        if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > p.after_turn) {
          return InvalidArgument(where + ": evidence turns must index turns up to after_turn");
        }
        p.evidence_turns.push_back(e.get<int>());
      }
      t.probes.push_back(std::move(p));
    }
  }
  return t;
}

Result<std::string> RenderTracePrompt(const tokenizer::ChatTemplate& tmpl, const AgentTrace& trace,
                                      int last, const std::string& question) {
  std::vector<tokenizer::ChatMessage> msgs;
  std::string system = trace.system;
  if (!trace.tools.empty()) system += "\n\nTools:\n" + trace.tools.dump();
  msgs.push_back({"system", system});
  for (int i = 0; i <= last; ++i) {
    const TraceTurn& t = trace.turns[static_cast<size_t>(i)];
    msgs.push_back({t.role, t.content});
  }
  if (!question.empty()) msgs.push_back({"user", question});
  return tokenizer::RenderChat(tmpl, msgs, /*add_generation_prompt=*/true);
}

Result<TraceRun> RunAgentTrace(const model::Model& model, const tokenizer::Tokenizer& tok,
                               ThreadPool* threads, const tokenizer::ChatTemplate& tmpl,
                               const AgentTrace& trace, const std::string& policy,
                               const nlohmann::json& config, const EvalAgentOptions& options,
                               int answer_tokens, const std::function<void(int, int)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<EvalAgent> agent,
                         EvalAgent::Create(model, tok, threads, policy, config, options));
  TraceRun run;
  const int n = static_cast<int>(trace.turns.size());
  for (int i = 0; i < n; ++i) {
    if (trace.turns[i].role == "assistant") continue;  // it arrives in the next request
    KVMEM_ASSIGN_OR_RETURN(std::string prompt, RenderTracePrompt(tmpl, trace, i, ""));
    KVMEM_ASSIGN_OR_RETURN(memory::PromptAccount a, agent->Ingest(prompt));
    run.requests.push_back(
        {i, a.prompt_tokens, a.cached_tokens, LiveRows(agent->policy().Report(), a.prompt_tokens)});
    for (size_t p = 0; p < trace.probes.size(); ++p) {
      const TraceProbe& probe = trace.probes[p];
      if (probe.after_turn != i) continue;
      KVMEM_ASSIGN_OR_RETURN(std::string q, RenderTracePrompt(tmpl, trace, i, probe.question));
      const std::vector<int32_t> gold =
          tok.Encode(probe.answer, /*add_special=*/false, /*parse_special=*/false);
      KVMEM_ASSIGN_OR_RETURN(Asked asked, agent->Ask(q, "", gold, answer_tokens));
      TraceProbeResult r;
      r.probe = static_cast<int>(p);
      r.nll = asked.nll;
      r.prediction = asked.prediction;
      r.first_logits = std::move(asked.first_logits);
      r.prompt_rows = asked.account.prompt_tokens;
      r.live_rows = LiveRows(asked.report, r.prompt_rows);
      const nlohmann::json* live =
          asked.detail.is_object() && asked.detail.contains("live_prompt_bytes")
              ? &asked.detail["live_prompt_bytes"]
              : nullptr;
      int64_t total = 0, kept = 0;
      for (int e : probe.evidence_turns) {
        const std::string& content = trace.turns[static_cast<size_t>(e)].content;
        const size_t at = q.find(content), in = content.find(probe.answer);
        if (at == std::string::npos || in == std::string::npos) continue;
        const int64_t b = static_cast<int64_t>(at + in);
        const int64_t len = static_cast<int64_t>(probe.answer.size());
        total += len;
        kept += live == nullptr ? len : Covered(*live, b, b + len);
      }
      r.evidence_kept = total > 0 ? static_cast<double>(kept) / total : 1.0;
      run.probes.push_back(std::move(r));
    }
    if (progress) progress(i + 1, n);
  }
  run.kv_peak_bytes = agent->kv_peak_bytes();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

}  // namespace kvmem::eval
