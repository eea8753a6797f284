// A multi-agent scenario (semantic.md §3.5): agents with private working memories, and phases in
// which some of them talk for a few rounds. Parsed from YAML and validated whole, so a scenario
// that loads can run: every agent, phase and template reference resolves, and no agent's
// template names a phase that agent neither took part in nor was let see (`visible_to`): that
// would leak the phase's messages.
//
//   name: gossip
//   agents:
//     - {id: alice, name: Alice, system: "You are Alice ...", permanent: true,
//        memory: {policy: full, config: {}}}
//   phases:
//     - name: alice_bob
//       label: "Phase 1: Alice & Bob (Private)"
//       agents: [alice, bob]          # speaking order
//       auto_rounds: 3                # each agent speaks once per round
//       prompt: "Talk about Eve."     # opens the phase for every agent in it
//       per_agent_prompt_templates:   # added to that agent's opening, resolved from its view
//         alice: "Earlier: ${alice_bob.messages[alice]}"
//       visible_to: [judge]           # optional: may also read this phase in their templates
//
// Optional top-level keys beyond the paper's: `max_tokens` (per reply, default 96) and
// `temperature` (default 0, greedy).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "nlohmann/json.hpp"

namespace kvmem::scenario {

struct AgentSpec {
  std::string id;      // [A-Za-z0-9_-]+, unique in the scenario
  std::string name;    // how others see it in transcripts ("Alice")
  std::string system;  // its system prompt
  // The agents API's memory object ({"policy", "config"}); null: the server's default.
  nlohmann::json memory;
  bool permanent = true;  // false: deleted when the run ends
};

struct Phase {
  std::string name;                 // [A-Za-z0-9_-]+, unique; templates name phases by it
  std::string label;                // shown in transcripts and openings; defaults to name
  std::vector<std::string> agents;  // ids, in speaking order
  int auto_rounds = 1;
  std::string prompt;                            // may be empty
  std::map<std::string, std::string> templates;  // agent id -> template
  // Agents beyond `agents` whose templates may read this phase's messages (a judge).
  std::vector<std::string> visible_to;
};

struct Scenario {
  std::string name;  // [A-Za-z0-9_-]+
  std::vector<AgentSpec> agents;
  std::vector<Phase> phases;
  int max_tokens = 96;
  double temperature = 0.0;

  const AgentSpec* FindAgent(std::string_view id) const;
  // The index of the phase named `name`, or -1.
  int FindPhase(std::string_view name) const;
};

// Parses and validates; errors name the YAML line and the offending key or reference.
Result<Scenario> ParseScenario(std::string_view yaml);
// Reads the file (at most 1 MiB) and parses it.
Result<Scenario> LoadScenario(const std::string& path);

}  // namespace kvmem::scenario
