// Tools in Qwen 2.5/3's own format (tokenizer/qwen_tools.h renders the prompt), for a model whose
// chat template has it (ModelInfo::tool_format): the model was trained to answer with
// <tool_call>{"name": …, "arguments": {…}}</tool_call> blocks after its text, so kvmem asks for
// those instead of its generic format.
// - Several calls per turn (parallel_tool_calls), each its own block.
// - tool_choice required / a named function: the turn is held to one or more blocks of the tools'
//   schemas, in json.dumps' spelling (JsonSpelling::kPython), by a grammar (QwenCallGrammar); auto
//   and none: no grammar, and blocks in the reply are read as calls (the template has no way to
//   tell the model not to call).
// - Calls are written back as the template's tojson writes them (Python's json.dumps), tool
//   definitions in OpenAI's key order with their schemas' keys in name order, so a call the model
//   wrote in that spelling renders byte for byte and the agent's next turn matches its cache.
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "core/status.h"
#include "serve/tool_calls.h"

namespace kvmem::serve {

// ApplyTools for ToolFormat::kQwen (tools given or not: tool messages and calls keep the format).
Status ApplyQwenTools(const ToolRequest& request, const std::vector<ToolTurn>& turns,
                      GenerationRequest* out);

}  // namespace kvmem::serve
