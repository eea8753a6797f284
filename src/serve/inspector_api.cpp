#include "serve/inspector_api.h"

#include "serve/json_body.h"

namespace kvmem::serve {

std::string AgentMemoryJson(const std::string& id, const memory::AgentMemoryView& memory) {
  const Json& inspected = memory.memory;
  const auto field = [&](const char* name) {
    return inspected.is_object() && inspected.contains(name) ? inspected.at(name) : Json::array();
  };
  Json out = {{"id", id},
              {"object", "agent.memory"},
              {"policy", memory.policy},
              {"rows", memory.rows},
              {"text", memory.text},
              {"cached", field("cached")},
              {"parts", field("parts")}};
  if (inspected.is_object() && inspected.contains("note")) out["note"] = inspected.at("note");
  return DumpJson(out);
}

std::string AgentTurnsJson(const std::string& id, const std::vector<memory::TurnRecord>& turns) {
  Json data = Json::array();
  for (const memory::TurnRecord& t : turns) {
    data.push_back({{"object", "agent.turn"},
                    {"turn", t.turn},
                    {"created_ms", t.at_unix_ms},
                    {"prompt_tokens", t.prompt_tokens},
                    {"cached_tokens", t.cached_tokens},
                    {"tier", memory::TierName(t.tier)},
                    {"load_ms", t.load_ms},
                    {"report", t.report},
                    {"detail", t.detail}});
  }
  return DumpJson({{"id", id}, {"object", "list"}, {"data", std::move(data)}});
}

}  // namespace kvmem::serve
