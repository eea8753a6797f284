// libFuzzer target for scenario files (`kvmem scenario run|check`): the input is a YAML document,
// parsed and validated as the CLI does (yaml-cpp, then scenario/scenario.cpp). An accepted
// scenario is checked for what the runner relies on: every phase names known agents, and every
// template resolves (over empty earlier phases) and names only earlier phases its agent was in or
// may see. See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>

#include "scenario/scenario.h"
#include "scenario/templates.h"

namespace kvmem::fuzz {
namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

bool Has(const std::vector<std::string>& ids, const std::string& id) {
  for (const std::string& s : ids) {
    if (s == id) return true;
  }
  return false;
}

void CheckScenario(const scenario::Scenario& s) {
  Check(!s.agents.empty() && !s.phases.empty());
  for (size_t i = 0; i < s.phases.size(); ++i) {
    const scenario::Phase& p = s.phases[i];
    Check(p.auto_rounds >= 1 && !p.agents.empty());
    for (const std::string& id : p.agents) Check(s.FindAgent(id) != nullptr);
    for (const auto& [owner, text] : p.templates) {
      Check(Has(p.agents, owner));
      auto refs = scenario::FindTemplateRefs(text);
      Check(refs.ok());
      for (const scenario::TemplateRef& ref : *refs) {
        const int j = s.FindPhase(ref.phase);
        Check(j >= 0 && j < static_cast<int>(i));
        Check(Has(s.phases[j].agents, owner) || Has(s.phases[j].visible_to, owner));
      }
      Check(scenario::ResolveTemplate(text, s, {}).ok());
    }
  }
}

}  // namespace
}  // namespace kvmem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto s =
      kvmem::scenario::ParseScenario(std::string_view(reinterpret_cast<const char*>(data), size));
  if (s.ok()) kvmem::fuzz::CheckScenario(*s);
  return 0;
}
