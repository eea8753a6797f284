// The generic tool format: rendering a conversation and the grammar of the model's turn (the
// format is described in tool_calls.h; the output parser is in tool_output_parser.cpp).
#include "serve/tool_calls.h"

#include <map>
#include <string>
#include <string_view>

#include "core/log.h"
#include "engine/grammar/json_schema.h"
#include "serve/harmony_tools.h"
#include "serve/llama31_tools.h"
#include "serve/qwen_tools.h"

namespace kvmem::serve {
namespace {

using OJson = nlohmann::ordered_json;

constexpr std::string_view kToolsIntro = "You can call tools. The tools, one JSON object each:\n";
constexpr std::string_view kToolsHowTo =
    "\nAnswer with one JSON object and nothing else: "
    "{\"tool_calls\":[{\"name\":\"<tool name>\",\"arguments\":{<its arguments>}}]} to call one "
    "or more tools, or {\"response\":\"<your reply>\"} to reply to the user. The results of "
    "tools come back in a user message, one line per call: "
    "{\"tool_response\":{\"name\":\"<tool name>\",\"content\":<its result>}}.";

std::string ToolsSystemText(const std::vector<ToolDef>& tools) {
  std::string text(kToolsIntro);
  for (const ToolDef& t : tools) {
    Json line = {{"name", t.name}, {"parameters", t.parameters}};
    if (!t.description.empty()) line["description"] = t.description;
    text += DumpJson(line) + "\n";
  }
  return text + std::string(kToolsHowTo);
}

// An assistant turn as the model writes it under the grammar: keys in a fixed order, compact.
std::string AssistantText(const ToolTurn& turn) {
  if (turn.calls.empty()) return "{\"response\":" + DumpJson(Json(turn.text)) + "}";
  std::string out = "{";
  // A client's own text beside calls (Anthropic allows both) is kept for the model to see,
  // though kvmem never writes both.
  if (!turn.text.empty()) out += "\"response\":" + DumpJson(Json(turn.text)) + ",";
  out += "\"tool_calls\":[";
  for (size_t i = 0; i < turn.calls.size(); ++i) {
    const ToolCall& c = turn.calls[i];
    if (i > 0) out += ",";
    out += "{\"name\":" + DumpJson(Json(c.name)) + ",\"arguments\":" +
           (c.arguments.empty() ? std::string("{}") : c.arguments) + "}";
  }
  return out + "]}";
}

std::string ToolResultLine(const ToolTurn& turn, const std::map<std::string, std::string>& names) {
  OJson response = OJson::object();
  const auto it = names.find(turn.tool_call_id);
  if (it != names.end()) response["name"] = it->second;
  response["content"] = turn.text;
  if (turn.is_error) response["is_error"] = true;
  return OJson{{"tool_response", std::move(response)}}.dump(-1, ' ', false,
                                                            OJson::error_handler_t::replace);
}

// Moves a tool's $defs/definitions into the shared $defs under "t<i>_…" and points its $refs
// there, so that every tool's schema can sit inside one root schema.
void RewriteRefs(OJson* node, const std::string& prefix) {
  if (node->is_object()) {
    for (auto& [key, value] : node->items()) {
      if (key == "$ref" && value.is_string()) {
        std::string ref = value.get<std::string>();
        if (ref == "#") {
          value = "#/$defs/" + prefix;
        } else if (ref.rfind("#/$defs/", 0) == 0) {
          value = "#/$defs/" + prefix + "_" + ref.substr(8);
        } else if (ref.rfind("#/definitions/", 0) == 0) {
          value = "#/$defs/" + prefix + "_" + ref.substr(14);
        }
      } else {
        RewriteRefs(&value, prefix);
      }
    }
  } else if (node->is_array()) {
    for (OJson& v : *node) RewriteRefs(&v, prefix);
  }
}

OJson RelocateDefs(OJson params, const std::string& prefix, OJson* defs) {
  for (const char* key : {"$defs", "definitions"}) {
    if (!params.is_object() || !params.contains(key)) continue;
    OJson own = std::move(params[key]);
    params.erase(key);
    if (!own.is_object()) continue;
    for (auto& [name, schema] : own.items()) {
      RewriteRefs(&schema, prefix);
      (*defs)[prefix + "_" + name] = std::move(schema);
    }
  }
  RewriteRefs(&params, prefix);
  (*defs)[prefix] = params;  // the target of "#" refs; unused ones cost nothing
  return params;
}

// A tool's arguments schema, or any object for a non-strict tool the compiler refuses.
Result<OJson> ArgumentsSchema(const ToolDef& tool) {
  const std::string text = DumpJson(tool.parameters);
  Result<std::string> compiled = engine::grammar::JsonSchemaToGbnf(text);
  if (compiled.ok()) return OJson::parse(text);
  if (tool.strict) return FieldError(tool.field, compiled.status().message());
  KVMEM_LOG_WARN("tool %s: arguments not constrained (%s)", tool.name.c_str(),
                 compiled.status().message().c_str());
  return OJson{{"type", "object"}};
}

}  // namespace

Status ValidateToolName(std::string_view name, std::string_view field) {
  if (name.empty() || name.size() > 64) return FieldError(field, "must be 1 to 64 characters");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return FieldError(field, "may hold only letters, digits, '_' and '-'");
  }
  return Status::Ok();
}

std::vector<ChatMessage> RenderToolConversation(const ToolRequest& request,
                                                const std::vector<ToolTurn>& turns) {
  std::vector<ChatMessage> out;
  size_t first = 0;
  if (!request.tools.empty()) {
    std::string system = ToolsSystemText(request.tools);
    if (!turns.empty() && turns[0].role == "system") {
      system = turns[0].text + "\n\n" + system;
      first = 1;
    }
    out.push_back({"system", std::move(system)});
  }
  std::map<std::string, std::string> names;  // call id -> tool name
  bool last_is_results = false;              // out.back() is a user message of tool results
  for (size_t i = first; i < turns.size(); ++i) {
    const ToolTurn& t = turns[i];
    if (t.role == "assistant") {
      for (const ToolCall& c : t.calls) names[c.id] = c.name;
      out.push_back({"assistant", AssistantText(t)});
      last_is_results = false;
    } else if (t.role == "tool" || (t.role == "user" && last_is_results)) {
      const std::string line = t.role == "tool" ? ToolResultLine(t, names) : t.text;
      if (last_is_results) {
        out.back().content += "\n" + line;
      } else {
        out.push_back({"user", line});
      }
      last_is_results = t.role == "tool";
    } else {
      out.push_back({t.role, t.text});
      last_is_results = false;
    }
  }
  return out;
}

Status ApplyTools(ToolFormat format, const ToolRequest& request, const std::vector<ToolTurn>& turns,
                  GenerationRequest* out) {
  if (!request.tools.empty() && out->grammar != nullptr) {
    return FieldError("tools", "cannot be combined with response_format or grammar");
  }
  if (format == ToolFormat::kLlama31 && !request.tools.empty()) {
    return ApplyLlama31Tools(request, turns, out);
  }
  if (format == ToolFormat::kQwen) return ApplyQwenTools(request, turns, out);
  if (format == ToolFormat::kHarmony) return ApplyHarmonyTools(request, turns, out);
  out->messages = RenderToolConversation(request, turns);
  if (request.tools.empty()) return Status::Ok();
  KVMEM_ASSIGN_OR_RETURN(out->grammar, ToolOutputGrammar(request));
  return Status::Ok();
}

namespace {

// One schema per tool tool_choice allows: {"name": its name, <args_key>: its arguments}; the
// tools' own $defs move into *defs.
Result<OJson> CallSchemas(const ToolRequest& request, const char* args_key, OJson* defs) {
  OJson calls = OJson::array();
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const ToolDef& tool = request.tools[i];
    if (request.choice.mode == ToolChoiceMode::kNamed && tool.name != request.choice.name) continue;
    KVMEM_ASSIGN_OR_RETURN(OJson args, ArgumentsSchema(tool));
    OJson call = {{"type", "object"},
                  {"properties",
                   {{"name", {{"const", tool.name}}},
                    {args_key, RelocateDefs(std::move(args), "t" + std::to_string(i), defs)}}},
                  {"required", {"name", args_key}}};
    calls.push_back(std::move(call));
  }
  return calls;
}

// The grammar of the schema `root` in `spelling`; `wrapper`: rules that use the schema's as
// "root", the first of them the start rule (its name has a "_", which the schema compiler's
// names never have).
Result<std::shared_ptr<const engine::grammar::Grammar>> CompileRoot(
    OJson root, OJson defs, engine::grammar::JsonSpelling spelling, std::string_view wrapper = "") {
  if (!defs.empty()) root["$defs"] = std::move(defs);
  Result<std::string> gbnf = engine::grammar::JsonSchemaToGbnf(root.dump(), spelling);
  if (!gbnf.ok()) return FieldError("tools", gbnf.status().message());
  std::string text = std::move(*gbnf);
  std::string_view start = "root";
  if (!wrapper.empty()) {
    text = std::string(wrapper) + text;
    start = wrapper.substr(0, wrapper.find(' '));
  }
  Result<engine::grammar::Grammar> g = engine::grammar::Grammar::Parse(text, start);
  if (!g.ok()) return FieldError("tools", g.status().message());
  return std::make_shared<const engine::grammar::Grammar>(std::move(*g));
}

}  // namespace

Result<std::shared_ptr<const engine::grammar::Grammar>> Llama31CallGrammar(
    const ToolRequest& request) {
  OJson defs = OJson::object();
  KVMEM_ASSIGN_OR_RETURN(OJson calls, CallSchemas(request, "parameters", &defs));
  return CompileRoot({{"anyOf", std::move(calls)}}, std::move(defs),
                     engine::grammar::JsonSpelling::kPython);
}

Result<std::shared_ptr<const engine::grammar::Grammar>> QwenCallGrammar(
    const ToolRequest& request) {
  OJson defs = OJson::object();
  KVMEM_ASSIGN_OR_RETURN(OJson calls, CallSchemas(request, "arguments", &defs));
  const bool one = !request.parallel || request.choice.mode == ToolChoiceMode::kNamed;
  const std::string wrapper =
      std::string(one ? "tool_turn ::= tool_call\n"
                      : "tool_turn ::= tool_call (\"\\n\" tool_call)*\n") +
      "tool_call ::= \"<tool_call>\\n\" root \"\\n</tool_call>\"\n";
  return CompileRoot({{"anyOf", std::move(calls)}}, std::move(defs),
                     engine::grammar::JsonSpelling::kPython, wrapper);
}

Result<std::shared_ptr<const engine::grammar::Grammar>> ToolOutputGrammar(
    const ToolRequest& request) {
  OJson defs = OJson::object();
  KVMEM_ASSIGN_OR_RETURN(OJson calls, CallSchemas(request, "arguments", &defs));
  OJson list = {{"type", "array"}, {"items", {{"anyOf", calls}}}, {"minItems", 1}};
  if (!request.parallel || request.choice.mode == ToolChoiceMode::kNamed) list["maxItems"] = 1;
  const OJson call_turn = {{"type", "object"},
                           {"properties", {{"tool_calls", list}}},
                           {"required", {"tool_calls"}}};
  const OJson reply_turn = {{"type", "object"},
                            {"properties", {{"response", {{"type", "string"}}}}},
                            {"required", {"response"}}};
  OJson root;
  switch (request.choice.mode) {
    case ToolChoiceMode::kNone:
      root = reply_turn;
      break;
    case ToolChoiceMode::kRequired:
    case ToolChoiceMode::kNamed:
      root = call_turn;
      break;
    case ToolChoiceMode::kAuto:
      root = {{"anyOf", {call_turn, reply_turn}}};
      break;
  }
  return CompileRoot(std::move(root), std::move(defs), engine::grammar::JsonSpelling::kCompact);
}

}  // namespace kvmem::serve
