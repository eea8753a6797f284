// Per-agent prompt templates of a scenario: `${PHASE.messages[AGENT]}` stands for the messages
// of an earlier phase as AGENT saw them, its own labelled "You" (semantic.md §3.5).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvmem::scenario {

struct Scenario;

struct TemplateRef {
  std::string phase;
  std::string agent;  // the perspective
  size_t begin = 0;   // [begin, end) of the reference in the template
  size_t end = 0;
};

// Every reference of `text`, in order. InvalidArgument for a `${` that does not open a
// well-formed reference (names are [A-Za-z0-9_-]+).
Result<std::vector<TemplateRef>> FindTemplateRefs(std::string_view text);

struct Message {
  std::string agent;  // the speaker's id
  std::string text;
};

// "Name: text" lines, one per message; the perspective agent's own are "You: text".
std::string FormatTranscript(const std::vector<Message>& messages, const Scenario& scenario,
                             std::string_view perspective);

// `text` with each reference replaced by its phase's messages from its agent's perspective.
// `phase_messages` holds the phases run so far; a phase not in it resolves to nothing (the
// validated scenario only names earlier phases).
Result<std::string> ResolveTemplate(
    std::string_view text, const Scenario& scenario,
    const std::map<std::string, std::vector<Message>>& phase_messages);

}  // namespace kvmem::scenario
