#include "scenario/runner.h"

#include <optional>
#include <thread>
#include <utility>

namespace kvmem::scenario {
namespace {

// One agent's side of the run: its conversation as it has seen it.
struct AgentState {
  const AgentSpec* spec = nullptr;
  std::string api_id;
  std::vector<ChatMessage> history;  // everything it was sent and replied
  size_t sent = 0;                   // history[0, sent) is held by the server (caching on)
  size_t seen = 0;                   // messages of the current phase it has been shown
  bool opened_phase = false;         // it has had its first turn of the current phase
};

// A reply as the others see it: without the speaker's own "Name:" that small models tend to
// start with (the transcript labels every message already).
std::string PublicText(const std::string& reply, const std::string& name) {
  size_t begin = reply.find_first_not_of(" \n");
  if (begin != std::string::npos && reply.compare(begin, name.size() + 1, name + ":") == 0) {
    begin += name.size() + 1;
  }
  begin = reply.find_first_not_of(" \n", begin == std::string::npos ? reply.size() : begin);
  const size_t end = reply.find_last_not_of(" \n");
  return begin == std::string::npos ? std::string() : reply.substr(begin, end + 1 - begin);
}

class Run {
 public:
  Run(const Scenario& scenario, ScenarioClient* client, const RunOptions& options)
      : s_(scenario), client_(client), o_(options) {}

  Result<RunResult> Go() {
    KVMEM_RETURN_IF_ERROR(OpenAgents());
    for (size_t i = 0; i < s_.phases.size(); ++i) {
      Status st = RunPhase(i);
      if (!st.ok()) return st.WithContext("phase '" + s_.phases[i].name + "'");
    }
    KVMEM_RETURN_IF_ERROR(DeleteEphemeral());
    return std::move(result_);
  }

 private:
  bool Kept(const AgentSpec& a) const { return o_.cache && a.permanent; }

  Status OpenAgents() {
    for (const AgentSpec& a : s_.agents) {
      AgentState st;
      st.spec = &a;
      st.api_id = ApiAgentId(s_, a, o_.cache);
      if (!Kept(a)) KVMEM_RETURN_IF_ERROR(client_->DeleteAgent(st.api_id));
      const nlohmann::json memory =
          o_.cache ? a.memory
                   : nlohmann::json{{"policy", "none"}, {"config", nlohmann::json::object()}};
      KVMEM_ASSIGN_OR_RETURN(AgentOpened opened, client_->OpenAgent(st.api_id, memory, o_.cache));
      // A permanent agent resuming already holds its system prompt and earlier runs.
      if (!(opened.existed && opened.cached_tokens > 0)) st.history.push_back({"system", a.system});
      agents_.emplace(a.id, std::move(st));
    }
    return Status::Ok();
  }

  Status DeleteEphemeral() {
    for (const AgentSpec& a : s_.agents) {
      if (!Kept(a)) KVMEM_RETURN_IF_ERROR(client_->DeleteAgent(agents_.at(a.id).api_id));
    }
    return Status::Ok();
  }

  // The user message of `agent`'s next turn: its phase opening if this is its first turn of the
  // phase, then what the others said since it last spoke, then whose turn it is.
  Result<std::string> NextInput(const Phase& phase, AgentState* agent) {
    std::string text;
    if (!agent->opened_phase) {
      text = phase.label + "\n";
      auto t = phase.templates.find(agent->spec->id);
      if (t != phase.templates.end()) {
        KVMEM_ASSIGN_OR_RETURN(std::string resolved, ResolveTemplate(t->second, s_, past_));
        text += resolved + "\n";
      }
      if (!phase.prompt.empty()) text += phase.prompt + "\n";
      agent->opened_phase = true;
    }
    std::vector<Message> news;
    for (size_t i = agent->seen; i < current_.messages.size(); ++i) {
      if (current_.messages[i].agent != agent->spec->id) news.push_back(current_.messages[i]);
    }
    agent->seen = current_.messages.size();
    if (!news.empty()) text += FormatTranscript(news, s_, agent->spec->id) + "\n";
    return text + "Your turn, " + agent->spec->name + ".";
  }

  // The messages of the request: what the server does not hold yet, or everything.
  std::vector<ChatMessage> Request(const AgentState& agent) const {
    const size_t from = o_.cache ? agent.sent : 0;
    return {agent.history.begin() + static_cast<std::ptrdiff_t>(from), agent.history.end()};
  }

  void Record(const std::string& id, const ChatReply& reply) {
    AgentState& agent = agents_.at(id);
    agent.history.push_back({"assistant", reply.text});
    agent.sent = agent.history.size();
    current_.messages.push_back({id, PublicText(reply.text, agent.spec->name)});
    AgentPhaseStats& st = current_.agents[id];
    ++st.turns;
    st.prompt_tokens += reply.prompt_tokens;
    st.cached_tokens += reply.cached_tokens;
    st.ttft_ms_sum += reply.ttft_ms;
    if (o_.progress) {
      o_.progress(phase_name_ + " round " + std::to_string(round_) + ": " + id + " (" +
                  std::to_string(reply.prompt_tokens) + " prompt tokens, " +
                  std::to_string(reply.cached_tokens) + " cached)");
    }
  }

  Status Turn(const Phase& phase, const std::string& id) {
    AgentState& agent = agents_.at(id);
    KVMEM_ASSIGN_OR_RETURN(std::string input, NextInput(phase, &agent));
    agent.history.push_back({"user", std::move(input)});
    auto reply = client_->Chat(agent.api_id, Request(agent), max_tokens(), s_.temperature);
    if (!reply.ok()) return reply.status().WithContext("agent '" + id + "'");
    Record(id, *reply);
    return Status::Ok();
  }

  // Every agent of the phase answers the messages before the round, concurrently.
  Status BatchRound(const Phase& phase) {
    std::vector<std::vector<ChatMessage>> requests;
    for (const std::string& id : phase.agents) {
      AgentState& agent = agents_.at(id);
      KVMEM_ASSIGN_OR_RETURN(std::string input, NextInput(phase, &agent));
      agent.history.push_back({"user", std::move(input)});
      requests.push_back(Request(agent));
    }
    std::vector<std::optional<Result<ChatReply>>> replies(phase.agents.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < phase.agents.size(); ++i) {
      threads.emplace_back([&, i] {
        replies[i] = client_->Chat(agents_.at(phase.agents[i]).api_id, requests[i], max_tokens(),
                                   s_.temperature);
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < phase.agents.size(); ++i) {
      if (!replies[i]->ok())
        return replies[i]->status().WithContext("agent '" + phase.agents[i] + "'");
      Record(phase.agents[i], replies[i]->value());
      // Its own reply is not news to it; the others' of this round are.
      agents_.at(phase.agents[i]).seen = current_.messages.size() - i - 1;
    }
    return Status::Ok();
  }

  Status RunPhase(size_t index) {
    const Phase& phase = s_.phases[index];
    current_ = PhaseResult();
    phase_name_ = phase.name;
    for (const std::string& id : phase.agents) {
      agents_.at(id).seen = 0;
      agents_.at(id).opened_phase = false;
    }
    for (round_ = 1; round_ <= phase.auto_rounds; ++round_) {
      if (o_.batch) {
        KVMEM_RETURN_IF_ERROR(BatchRound(phase));
        continue;
      }
      for (const std::string& id : phase.agents) KVMEM_RETURN_IF_ERROR(Turn(phase, id));
    }
    past_[phase.name] = current_.messages;
    result_.phases.push_back(std::move(current_));
    return Status::Ok();
  }

  int max_tokens() const { return o_.max_tokens > 0 ? o_.max_tokens : s_.max_tokens; }

  const Scenario& s_;
  ScenarioClient* client_;
  const RunOptions& o_;
  std::map<std::string, AgentState> agents_;
  std::map<std::string, std::vector<Message>> past_;  // finished phases' messages
  PhaseResult current_;
  std::string phase_name_;
  int round_ = 0;
  RunResult result_;
};

nlohmann::json TokenCounts(int64_t prompt, int64_t cached) {
  return {
      {"prompt_tokens", prompt}, {"cached_tokens", cached}, {"prefilled_tokens", prompt - cached}};
}

// Markdown block quote.
std::string Quote(const std::string& text) {
  std::string out = "> ";
  for (char c : text) {
    out += c;
    if (c == '\n') out += "> ";
  }
  return out;
}

}  // namespace

std::string ApiAgentId(const Scenario& scenario, const AgentSpec& agent, bool cache) {
  return std::string(cache ? "scenario/" : "scenario-nocache/") + scenario.name + "/" + agent.id;
}

Result<RunResult> RunScenario(const Scenario& scenario, ScenarioClient* client,
                              const RunOptions& options) {
  return Run(scenario, client, options).Go();
}

nlohmann::json RunResult::Report(const Scenario& scenario, const RunOptions& options) const {
  nlohmann::json out = {{"scenario", scenario.name},
                        {"caching", options.cache},
                        {"batch", options.batch},
                        {"phases", nlohmann::json::array()}};
  int64_t prompt = 0;
  int64_t cached = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& spec = scenario.phases[i];
    nlohmann::json agents = nlohmann::json::object();
    int64_t phase_prefilled = 0;
    for (const std::string& id : spec.agents) {
      auto it = phases[i].agents.find(id);
      if (it == phases[i].agents.end()) continue;
      const AgentPhaseStats& st = it->second;
      nlohmann::json a = TokenCounts(st.prompt_tokens, st.cached_tokens);
      a["turns"] = st.turns;
      a["ttft_ms"] = st.turns > 0 ? st.ttft_ms_sum / st.turns : 0.0;
      agents[id] = std::move(a);
      prompt += st.prompt_tokens;
      cached += st.cached_tokens;
      phase_prefilled += st.prompt_tokens - st.cached_tokens;
    }
    out["phases"].push_back({{"name", spec.name},
                             {"label", spec.label},
                             {"prefilled_tokens", phase_prefilled},
                             {"agents", std::move(agents)}});
  }
  out["totals"] = TokenCounts(prompt, cached);
  return out;
}

std::string RunResult::Transcript(const Scenario& scenario, const RunOptions& options) const {
  std::string out = "# " + scenario.name + (options.cache ? "" : " (caching off)") + "\n";
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& spec = scenario.phases[i];
    out += "\n## " + spec.label + "\n\n";
    if (!spec.prompt.empty()) out += Quote(spec.prompt) + "\n\n";
    for (const Message& m : phases[i].messages) {
      const AgentSpec* a = scenario.FindAgent(m.agent);
      out += "**" + (a != nullptr ? a->name : m.agent) + ":** " + m.text + "\n\n";
    }
  }
  return out;
}

}  // namespace kvmem::scenario
