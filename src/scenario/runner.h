// Runs a scenario (scenario.h) against a kvmem server: each agent is a kvmem agent whose KV cache
// is its private working memory (semantic.md §3.5, §4.4).
//
// With caching on, each agent keeps a server-side conversation and every turn sends only what
// is new to it: the phase's opening (its label, its resolved template, its prompt) on its first
// turn in a phase, then the other agents' messages since it last spoke, as one user message.
// The prompt of every turn therefore extends the agent's cached conversation (EXTEND): only the
// new part is prefilled, in a later phase too, and across runs for permanent agents. What an
// agent is shown never includes a phase it was not in: injected messages (templates) reach its
// prompt and cache only, never another agent's or the transcript (the `visible_to` scoping).
//
// With caching off (the paper's baseline), the agents keep nothing (policy `none`) and every
// turn sends and prefills the agent's whole conversation, which is the same text.
//
// Permanent agents (ids "scenario/NAME/ID") survive the run and resume in the next; the others
// are deleted at its start and end. Agents of the uncached run ("scenario-nocache/NAME/ID")
// are all deleted.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "nlohmann/json.hpp"
#include "scenario/scenario.h"
#include "scenario/scenario_client.h"
#include "scenario/templates.h"

namespace kvmem::scenario {

struct RunOptions {
  bool cache = true;
  // Each round's agents answer at once (in one batch of the server's scheduler), each seeing the
  // messages before the round; otherwise they take turns, each seeing the ones before it.
  bool batch = false;
  int max_tokens = 0;                                // 0: the scenario's
  std::function<void(const std::string&)> progress;  // one line per turn
};

struct AgentPhaseStats {
  int turns = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  double ttft_ms_sum = 0;
};

struct PhaseResult {
  std::vector<Message> messages;  // the phase's public transcript
  std::map<std::string, AgentPhaseStats> agents;
};

struct RunResult {
  std::vector<PhaseResult> phases;
  // {"scenario", "caching", "batch", "phases": [{"name", "label", "prefilled_tokens", "agents":
  //  {ID: {"turns", "prompt_tokens", "cached_tokens", "prefilled_tokens", "ttft_ms"}}}],
  //  "totals": {"prompt_tokens", "cached_tokens", "prefilled_tokens"}}; ttft_ms is the mean.
  nlohmann::json Report(const Scenario& scenario, const RunOptions& options) const;
  // Markdown: each phase's label, opening prompt and messages (never an agent's template).
  std::string Transcript(const Scenario& scenario, const RunOptions& options) const;
};

// The kvmem agent id of a scenario agent.
std::string ApiAgentId(const Scenario& scenario, const AgentSpec& agent, bool cache);

Result<RunResult> RunScenario(const Scenario& scenario, ScenarioClient* client,
                              const RunOptions& options);

}  // namespace kvmem::scenario
