#include "serve/harmony_tools.h"

#include <algorithm>

#include "serve/llama31_tools.h"
#include "serve/reply_format.h"
#include "tokenizer/harmony.h"

namespace kvmem::serve {
namespace {

using OJson = nlohmann::ordered_json;

bool Truthy(const Json& spec, const char* key) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_string() || it->is_array() || it->is_object()) return !it->empty();
  return true;
}

// Jinja's `~`-free string concatenation of a JSON value: strings as they are.
std::string Str(const Json& v) { return v.is_string() ? v.get<std::string>() : DumpJson(v); }

bool Required(const Json& spec, const std::string& name) {
  const auto it = spec.find("required");
  return it != spec.end() && it->is_array() &&
         std::find(it->begin(), it->end(), Json(name)) != it->end();
}

// The template's render_typescript_type.
std::string TsType(const Json& spec) {
  if (!spec.is_object()) return "any";
  const Json type = spec.value("type", Json());
  const std::string nullable = Truthy(spec, "nullable") ? " | null" : "";
  if (type == "array") {
    if (!Truthy(spec, "items")) return "any[]" + nullable;
    const Json& items = spec["items"];
    const Json item_type = items.is_object() ? items.value("type", Json()) : Json();
    std::string out;
    if (item_type == "string") {
      out = "string[]";
    } else if (item_type == "number" || item_type == "integer") {
      out = "number[]";
    } else if (item_type == "boolean") {
      out = "boolean[]";
    } else {
      const std::string inner = TsType(items);
      out = inner == "object | object" || inner.size() > 50 ? "any[]" : inner + "[]";
    }
    return out + nullable;
  }
  if (type.is_array() && !type.empty()) {
    std::string out;
    for (size_t i = 0; i < type.size(); ++i) out += (i > 0 ? " | " : "") + Str(type[i]);
    return out;
  }
  if (Truthy(spec, "oneOf") && spec["oneOf"].is_array()) {
    std::string out;
    for (const Json& variant : spec["oneOf"]) out += (out.empty() ? "" : " | ") + TsType(variant);
    return out;
  }
  if (type == "string") {
    if (!Truthy(spec, "enum") || !spec["enum"].is_array()) return "string" + nullable;
    std::string out = "\"";
    for (size_t i = 0; i < spec["enum"].size(); ++i) {
      out += (i > 0 ? "\" | \"" : "") + Str(spec["enum"][i]);
    }
    return out + "\"";
  }
  if (type == "number" || type == "integer") return "number";
  if (type == "boolean") return "boolean";
  if (type == "object") {
    if (!Truthy(spec, "properties") || !spec["properties"].is_object()) return "object";
    std::string out = "{\n";
    bool first = true;
    for (const auto& [name, prop] : spec["properties"].items()) {
      if (!first) out += ", ";
      first = false;
      // The template writes the newline and indentation before a nested property's type.
      out += name + (Required(spec, name) ? "" : "?") + ": \n                " + TsType(prop);
    }
    return out + "}";
  }
  return "any";
}

std::string ToolDeclaration(const ToolDef& tool) {
  std::string out;
  if (!tool.description.empty()) out += "// " + tool.description + "\n";
  out += "type " + tool.name + " = ";
  const Json& params = tool.parameters;
  if (!params.is_object() || !Truthy(params, "properties") || !params["properties"].is_object()) {
    return out + "() => any;\n\n";
  }
  out += "(_: {\n";
  for (const auto& [name, spec] : params["properties"].items()) {
    if (spec.is_object() && Truthy(spec, "description"))
      out += "// " + Str(spec["description"]) + "\n";
    out += name + (Required(params, name) ? "" : "?") + ": " + TsType(spec);
    if (spec.is_object() && spec.contains("default")) {
      if (Truthy(spec, "enum")) {
        out += ", // default: " + Str(spec["default"]);
      } else if (Truthy(spec, "oneOf")) {
        out += "// default: " + Str(spec["default"]);
      } else {
        out += ", // default: " + PythonJsonDumps(OJson::parse(DumpJson(spec["default"])));
      }
    }
    out += ",\n";
  }
  return out + "}) => any;\n\n";
}

}  // namespace

std::string HarmonyToolNamespace(const std::vector<ToolDef>& tools) {
  std::string out = "## functions\n\nnamespace functions {\n\n";
  for (const ToolDef& t : tools) out += ToolDeclaration(t);
  return out + "} // namespace functions";
}

Status ApplyHarmonyTools(const ToolRequest& request, const std::vector<ToolTurn>& turns,
                         GenerationRequest* out) {
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ToolTurn& t = turns[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (t.role == "assistant" && !t.calls.empty()) {
      if (t.calls.size() > 1) {
        return FieldError(field, "this model's template (harmony) takes one tool call per message");
      }
      const ToolCall& call = t.calls[0];
      const OJson args = call.arguments.empty()
                             ? OJson::object()
                             : OJson::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
      if (args.is_discarded()) {
        return FieldError(field, "the arguments of '" + call.name + "' are not JSON");
      }
      messages.push_back({.role = "assistant",
                          .content = t.text,
                          .tool = call.name,
                          .tool_arguments = PythonJsonDumps(args)});
    } else if (t.role == "tool") {
      messages.push_back({"tool", PythonJsonDumps(OJson(t.text))});  // the template's tojson
    } else {
      messages.push_back({t.role, t.text});
    }
  }
  out->messages = std::move(messages);
  out->template_tools = std::vector<std::string>();
  if (!request.tools.empty()) out->template_tools->push_back(HarmonyToolNamespace(request.tools));
  out->raw_reply = true;
  return Status::Ok();
}

void HarmonyToolReader::EndMessage(std::vector<ToolEvent>* events, std::vector<ToolCall>* calls) {
  if (body_ == Body::kCall) {
    const size_t begin = args_.find_first_not_of(" \t\r\n");
    const size_t end = args_.find_last_not_of(" \t\r\n");
    std::string text = begin == std::string::npos ? "" : args_.substr(begin, end - begin + 1);
    const OJson parsed = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object()) text = PythonJsonDumps(parsed);  // else as written: a client decides
    const int index = static_cast<int>(calls->size());
    ToolCall c{NewResponseId(id_prefix_), call_, text};
    events->push_back({.kind = ToolEvent::Kind::kCallStart, .index = index, .call = c});
    events->push_back(
        {.kind = ToolEvent::Kind::kCallArguments, .index = index, .text = c.arguments});
    calls->push_back(std::move(c));
  }
  state_ = State::kHeader;
  header_.clear();
  args_.clear();
  body_ = Body::kHidden;
}

void HarmonyToolReader::Push(std::string_view text, std::vector<ToolEvent>* events,
                             std::vector<ToolCall>* calls) {
  buf_.append(text);
  for (;;) {
    if (state_ == State::kHeader) {
      const size_t open = buf_.find("<|message|>");
      if (open == std::string::npos) return;  // the header is still arriving
      header_ += buf_.substr(0, open);
      buf_.erase(0, open + 11);
      const size_t start = header_.rfind("<|start|>");
      const tokenizer::HarmonyHeader h = tokenizer::ParseHarmonyHeader(
          start == std::string::npos ? std::string_view(header_)
                                     : std::string_view(header_).substr(start));
      opened_ = true;
      state_ = State::kBody;
      if (h.recipient.starts_with("functions.")) {
        body_ = Body::kCall;
        call_ = h.recipient.substr(10);
      } else {
        body_ = h.channel == "final" && h.recipient.empty() ? Body::kFinal : Body::kHidden;
      }
      continue;
    }
    // The body runs to a special token that ends the message; text before one is the body's.
    const size_t special = buf_.find("<|");
    const size_t close =
        special == std::string::npos ? std::string::npos : buf_.find("|>", special);
    size_t text_end = special == std::string::npos ? buf_.size() : special;
    if (special == std::string::npos && buf_.ends_with('<')) --text_end;  // "<|" may follow
    if (text_end > 0) {
      if (body_ == Body::kFinal) {
        events->push_back({.kind = ToolEvent::Kind::kText, .text = buf_.substr(0, text_end)});
      } else if (body_ == Body::kCall) {
        args_ += buf_.substr(0, text_end);
      }
      buf_.erase(0, text_end);
    }
    if (special == std::string::npos || close == std::string::npos) return;
    const std::string token = buf_.substr(0, close - special + 2);
    buf_.erase(0, token.size());
    if (token == "<|end|>" || token == "<|return|>" || token == "<|call|>") {
      EndMessage(events, calls);
    } else if (body_ == Body::kFinal) {
      events->push_back({.kind = ToolEvent::Kind::kText, .text = token});
    } else if (body_ == Body::kCall) {
      args_ += token;
    }
  }
}

void HarmonyToolReader::Finish(std::vector<ToolEvent>* events, std::vector<ToolCall>* calls) {
  if (!opened_) {  // never in harmony's format: the reply as it is
    std::string text = header_ + buf_;
    if (!text.empty()) events->push_back({.kind = ToolEvent::Kind::kText, .text = std::move(text)});
    buf_.clear();
    return;
  }
  if (state_ == State::kBody) {
    // What is held back (an unclosed "<|"), then the message the end of the reply closes: a call
    // ends at <|call|>, which ends the reply before the reader sees it.
    if (body_ == Body::kFinal && !buf_.empty()) {
      events->push_back({.kind = ToolEvent::Kind::kText, .text = buf_});
    } else if (body_ == Body::kCall) {
      args_ += buf_;
    }
    buf_.clear();
    EndMessage(events, calls);
  }
}

}  // namespace kvmem::serve
