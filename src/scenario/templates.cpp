#include "scenario/templates.h"

#include "scenario/scenario.h"

namespace kvmem::scenario {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

// Reads a name at text[*pos], advancing past it; empty when there is none.
std::string_view ReadName(std::string_view text, size_t* pos) {
  const size_t start = *pos;
  while (*pos < text.size() && IsNameChar(text[*pos])) ++*pos;
  return text.substr(start, *pos - start);
}

bool Consume(std::string_view text, size_t* pos, std::string_view token) {
  if (text.substr(*pos, token.size()) != token) return false;
  *pos += token.size();
  return true;
}

}  // namespace

Result<std::vector<TemplateRef>> FindTemplateRefs(std::string_view text) {
  std::vector<TemplateRef> refs;
  for (size_t at = text.find("${"); at != std::string_view::npos; at = text.find("${", at)) {
    TemplateRef ref;
    ref.begin = at;
    size_t pos = at + 2;
    const std::string_view phase = ReadName(text, &pos);
    bool ok = !phase.empty() && Consume(text, &pos, ".messages[");
    const std::string_view agent = ok ? ReadName(text, &pos) : std::string_view();
    ok = ok && !agent.empty() && Consume(text, &pos, "]}");
    if (!ok) {
      return InvalidArgument("malformed template reference at offset " + std::to_string(at) +
                             " (expected ${PHASE.messages[AGENT]}): '" +
                             std::string(text.substr(at, 40)) + "'");
    }
    ref.phase = phase;
    ref.agent = agent;
    ref.end = pos;
    refs.push_back(std::move(ref));
    at = pos;
  }
  return refs;
}

std::string FormatTranscript(const std::vector<Message>& messages, const Scenario& scenario,
                             std::string_view perspective) {
  std::string out;
  for (const Message& m : messages) {
    const AgentSpec* speaker = scenario.FindAgent(m.agent);
    const std::string name = m.agent == perspective ? "You"
                             : speaker != nullptr   ? speaker->name
                                                    : m.agent;
    if (!out.empty()) out += '\n';
    out += name + ": " + m.text;
  }
  return out;
}

Result<std::string> ResolveTemplate(
    std::string_view text, const Scenario& scenario,
    const std::map<std::string, std::vector<Message>>& phase_messages) {
  KVMEM_ASSIGN_OR_RETURN(std::vector<TemplateRef> refs, FindTemplateRefs(text));
  std::string out;
  size_t copied = 0;
  for (const TemplateRef& ref : refs) {
    out.append(text.substr(copied, ref.begin - copied));
    auto it = phase_messages.find(ref.phase);
    if (it != phase_messages.end()) out += FormatTranscript(it->second, scenario, ref.agent);
    copied = ref.end;
  }
  out.append(text.substr(copied));
  return out;
}

}  // namespace kvmem::scenario
