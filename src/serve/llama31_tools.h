// Tools in Llama 3.1's own format (tokenizer/llama31_tools.h renders the prompt), for a model
// whose chat template is Llama 3.1's (ModelInfo::tool_format): the model was trained to answer
// {"name": "…", "parameters": {…}}, so kvmem asks for that instead of its generic format.
// - One call per assistant message (the template refuses more), so parallel calls are off.
// - tool_choice required / a named function: the call is held to the tools' schemas, in
//   json.dumps' spelling (JsonSpelling::kPython), by a grammar; auto and none: no grammar, and a
//   reply that opens with "{" is read as a call.
// - Calls are written back as the template's tojson writes them (Python's json.dumps: ", " and
//   ": " separators), tool results as JSON strings in "ipython" turns, tool definitions with
//   their keys in name order, so a call the model wrote in that spelling renders byte for byte.
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "serve/tool_calls.h"

namespace kvmem::serve {

// ApplyTools for ToolFormat::kLlama31 (request.tools non-empty).
Status ApplyLlama31Tools(const ToolRequest& request, const std::vector<ToolTurn>& turns,
                         GenerationRequest* out);

// Python's json.dumps(value) with ensure_ascii=False, as transformers' tojson filter writes.
std::string PythonJsonDumps(const nlohmann::ordered_json& value);

}  // namespace kvmem::serve
